// What a torchrun job's processes compare before they start (JobStart::expect_same): one command's
// config and options as text, the files each process reads from its own node, and the difference.
// defines: JobOption, job_text, job_difference, file_identity, files_identity
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "engine/config/run_config.h"

namespace odyssey {

/// One "name\tvalue" line of a job's text: a command-line option, or a file every process reads
/// from its own node ("the data file at training.dataset_path", file_identity's text).
using JobOption = std::pair<std::string, std::string>;

/// The text a torchrun process posts for JobStart::expect_same: `cfg` as a preset, less what only
/// rank 0's printing or the plan reads (description, [hardware], output.log_every) and output.dir
/// (which --out stands for), then `options` one per line.
std::string job_text(const RunConfig& cfg, const std::vector<JobOption>& options);

/// How rank `other`'s job text differs from rank 0's `lead`: the keys (by config_changes) and the
/// option lines, rank 0's value first, at most four named; `rule` is the command's sentence on
/// what its processes share ("every process of a torchrun job runs one preset with ...").
std::string job_difference(const std::string& lead, const std::string& other, const std::string& rule);

/// A file as this process finds it: "N bytes, CRC-32 of its first and last 64 KiB XXXXXXXX", or
/// "unreadable" (the command's own reading refuses it then). Not the whole file, which may be a
/// corpus of terabytes read at every start: a copy that differs only in its middle passes. A
/// FIFO or device is "unreadable" without a read that could block.
std::string file_identity(const std::string& path);

/// file_identity of each regular file of `dir` that `wanted` takes (by name), sorted by name:
/// "config.json: 1024 bytes, ...; model.safetensors: ...", or "no such files" / "unreadable".
std::string files_identity(const std::string& dir, const std::function<bool(const std::string&)>& wanted);

}  // namespace odyssey
