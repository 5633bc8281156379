// The torchrun-style launch: a job given on holdfastd's command line instead of
// (or on top of) a job file.
//
//   holdfastd --nproc-per-node 8 train.py --lr 3e-4          like torchrun: a .py runs under python3
//   holdfastd --nproc-per-node 8 -- /usr/bin/python3 train.py --lr 3e-4
//   holdfastd --nproc-per-node gpu --nnodes 2:4 -m mypkg.train   one rank per visible GPU, elastic 2..4 nodes
//   holdfastd --config job.toml --nproc-per-node 4 -- ./train   the job file's settings, this command
//
// The flags become a job file (JobTextFromFlags): the text recorded in lineage
// is what ran, so `holdfastd --resume` and `runctl resume` start the same job
// again, and every key not given keeps the job file's value or its default
// (docs/job-file.md). Plain functions; no I/O except DefaultRunDir's and
// CountVisibleGpus' reads of the environment and /proc.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace holdfast {

struct CommandLineJob {
  std::vector<std::string> command;  // after "--", or from the first positional argument on
  std::string module;                // -m MODULE: python3 -m MODULE ARGS
  std::string nproc_per_node;        // "" = not given; N, or "gpu" (one rank per visible GPU)
  std::string nnodes;                // "" = not given; N, or MIN:MAX (elastic)
  std::string name;                  // [job] name; "" = the job file's, else the script's stem
  std::string checkpoint_dir;        // [job] checkpoint_dir, for lineage
  int max_restarts = -1;             // [supervise] restart_budget; -1 = not given
  bool no_python = false;            // a .py first argument runs as it is (torchrun's --no-python)
  std::string workdir;               // [job] workdir when the job comes from flags: holdfastd's directory
  std::string python;                // the interpreter for a .py or -m: absolute path
  int visible_gpus = 0;              // for --nproc-per-node gpu
};

// Whether any job-defining flag was given (a command, -m, or a setting that
// overrides a job file).
bool HasCommandLineJob(const CommandLineJob& flags);

// --nnodes: "N" (min = max = N) or "MIN:MAX".
struct NodeRange {
  int min = 0;
  int max = 0;
};
Result<NodeRange> ParseNodeRange(const std::string& text);

// The job file text the flags mean: `base_text` (a job file's text; "" = none,
// then a command is required) with the flags' keys set. Errors name the flag.
Result<std::string> JobTextFromFlags(const CommandLineJob& flags, const std::string& base_text,
                                     const std::string& base_source);

// Where a run whose --run-dir was not given lives: holdfast-runs/NAME under
// $SLURM_SUBMIT_DIR inside a Slurm job, else under `cwd` — the same place for
// the same job name, so the same command line (or a requeued job) continues
// the run it started.
std::string DefaultRunDir(const std::string& job_name, const std::string& cwd);

// The run's name when the job file gives none: the script's stem
// ("train" for "python3 train.py", "mypkg.train" for "-m mypkg.train"), else
// the program's base name. Only [a-zA-Z0-9._-] are kept.
std::string JobNameFromCommand(const std::vector<std::string>& command);

// GPUs a rank started here can use: CUDA_VISIBLE_DEVICES' entries when set,
// else the NVIDIA driver's /proc/driver/nvidia/gpus entries under `proc_root`.
int CountVisibleGpus(const char* cuda_visible_devices, const std::string& proc_root = "/proc");

// The absolute path of `program` found on `path_env` ("" when not found).
std::string FindOnPath(const std::string& program, const char* path_env);

}  // namespace holdfast
