#!/usr/bin/env python3
"""Loads an `odyssey export --hf` directory with transformers and compares its logits on a
fixture's fixed batch with the fixture's reference logits.

Usage: check_export.py EXPORT_DIR FIXTURE_DIR
Prints one JSON object: {"architecture", "dtype", "max_abs_logit_diff", "max_abs_logit"}; exits 1
(with the reason on stderr) when transformers cannot load the directory as it is.
"""
import json
import sys

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM


def main():
    export_dir, fixture_dir = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    ref = load_file(fixture_dir + "/reference.safetensors")
    # output_loading_info: a tensor transformers had to initialise itself means a missing or
    # misnamed weight, which a logits comparison might miss at small scale.
    model, info = AutoModelForCausalLM.from_pretrained(export_dir, dtype=torch.float32, output_loading_info=True)
    problems = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    if problems:
        print("transformers loaded %s with %s" % (export_dir, problems), file=sys.stderr)
        return 1
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=ref["ids"]).logits.float()
    print(json.dumps({
        "architecture": type(model).__name__,
        "dtype": str(next(model.parameters()).dtype),
        "max_abs_logit_diff": float((logits - ref["logits"]).abs().max()),
        "max_abs_logit": float(ref["logits"].abs().max()),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
