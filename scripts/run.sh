#!/usr/bin/env bash
# What `make run` calls, with the build folder as $1: the studio on the default preset when a
# display is present; without one, it says so and runs the headless technique ladder and a short
# training of the same preset instead.
set -euo pipefail

BUILD="${1:-build}"
BIN="$BUILD/bin"
PRESET="presets/tiny-cpu.toml"
OUT="runs/make-run"

headless() {
  echo "run: $1"
  echo "run: odyssey ladder $PRESET"
  "$BIN/odyssey" ladder "$PRESET"
  echo
  # The preset's own 300 steps (about 2.5 minutes on two cores): the long-range passkey task's
  # answer accuracy rises from chance (1 in 8) within them, with every memory technique on.
  # --overwrite: each `make run` replaces the previous one's run (odyssey train refuses to
  # overwrite a run directory unasked).
  echo "run: odyssey train $PRESET --out $OUT --overwrite"
  "$BIN/odyssey" train "$PRESET" --out "$OUT" --overwrite
  echo "run: metrics in $OUT/metrics.jsonl; Perfetto trace in $OUT/trace.json (open it at ui.perfetto.dev)"
}

if [ -z "${DISPLAY:-}" ]; then
  headless "no display (\$DISPLAY is not set), so no studio window: the headless ladder and a short training instead"
  exit 0
fi
if [ ! -x "$BIN/odyssey-studio" ]; then
  headless "odyssey-studio was not built (ODYSSEY_STUDIO=OFF, or ImGui/GLFW/OpenGL missing: run make deps); running headless"
  exit 0
fi
echo "run: odyssey-studio $PRESET (close the window to quit)"
status=0
"$BIN/odyssey-studio" "$PRESET" || status=$?
if [ "$status" = 1 ]; then
  headless "the studio could not open a window on DISPLAY=$DISPLAY (see above); running headless instead"
  exit 0
fi
exit "$status"
