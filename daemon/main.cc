// holdfastd: the per-node supervisor of one training run.
//
//   holdfastd --run-dir DIR --config job.toml        start (or continue) the run in DIR
//   holdfastd --run-dir DIR --resume RUN [--from-step N]   a new attempt of RUN
//
// main() only wires objects together: flags, the job config, the event loop
// and the Supervisor.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <CLI/CLI.hpp>
#include <boost/asio/io_context.hpp>
#include <spdlog/spdlog.h>

#include "daemon/exit_codes.h"
#include "daemon/job_config.h"
#include "daemon/supervisor.h"
#include "lineage/lineage_db.h"

int main(int argc, char** argv) {
  using namespace holdfast;
  CLI::App app{"holdfastd: supervises a training run: launches its ranks, detects crashes and hangs, "
               "restarts from the newest checkpoint, records everything in DIR/lineage.db"};
  std::string run_dir, config_path, resume;
  int64_t from_step = -1;
  int nodes = 1, node_id = 0;
  std::string leader;
  uint16_t cluster_port = 0;
  app.add_option("--run-dir", run_dir, "the run's directory (lineage.db, logs, control socket)")->required();
  app.add_option("-c,--config", config_path, "job config (TOML; see examples/job.toml)");
  app.add_option("--resume", resume, "continue run RUN (id, unique prefix or 'latest') as a new attempt");
  app.add_option("--from-step", from_step, "with --resume: start from the checkpoint of step N")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--nodes", nodes, "number of nodes (daemons) in the run")->check(CLI::Range(1, 100000));
  app.add_option("--node-id", node_id, "this daemon's node: 0 leads, others follow")->check(CLI::NonNegativeNumber);
  app.add_option("--leader", leader, "followers: host:port of the leader (default: read DIR/cluster.addr)");
  app.add_option("--cluster-port", cluster_port, "leader: TCP port followers join on (0 = any)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  spdlog::set_pattern("[%H:%M:%S.%e] [holdfastd" + (node_id > 0 ? " node " + std::to_string(node_id) : std::string()) + "] [%^%l%$] %v");
  if (node_id >= nodes) {
    std::fprintf(stderr, "error: --node-id %d must be below --nodes %d\n", node_id, nodes);
    return kDaemonExitUsage;
  }
  if (node_id > 0 && leader.empty()) {
    // The leader writes its address into the (shared) run dir.
    for (int i = 0; i < 600 && leader.empty(); ++i) {
      std::ifstream in(run_dir + "/cluster.addr");
      std::getline(in, leader);
      if (leader.empty()) usleep(100 * 1000);
    }
    if (leader.empty()) {
      std::fprintf(stderr, "error: no --leader given and %s/cluster.addr did not appear\n", run_dir.c_str());
      return kDaemonExitUsage;
    }
  }
  if (from_step >= 0 && resume.empty()) {
    std::fprintf(stderr, "error: --from-step needs --resume RUN\n");
    return kDaemonExitUsage;
  }
  std::error_code ec;
  std::filesystem::create_directories(run_dir, ec);
  if (ec) {
    std::fprintf(stderr, "error: cannot create run dir %s: %s\n", run_dir.c_str(), ec.message().c_str());
    return kDaemonExitUsage;
  }
  if (config_path.empty()) {
    if (resume.empty()) {
      std::fprintf(stderr, "error: --config job.toml is required (or --resume RUN to continue a recorded run)\n");
      return kDaemonExitUsage;
    }
    // The run's own job config, as recorded in lineage.
    LineageOptions lo;
    lo.read_only = true;
    auto db = LineageDb::Open(run_dir + "/lineage.db", lo);
    auto run = db.ok() ? (resume == "latest" ? (*db)->LatestRun() : (*db)->GetRun(resume))
                       : Result<RunRecord>(db.status());
    if (!run.ok()) {
      std::fprintf(stderr, "error: cannot resume %s: %s\n", resume.c_str(), run.status().message().c_str());
      return kDaemonExitUsage;
    }
    config_path = run->config_path;
    if (!std::filesystem::exists(config_path)) {
      config_path = run_dir + "/job-" + run->run_id + ".toml";
      std::ofstream(config_path) << run->config_text;
    }
  }
  auto job = LoadJobConfig(config_path);
  if (!job.ok()) {
    std::fprintf(stderr, "error: %s\n", job.status().message().c_str());
    return kDaemonExitUsage;
  }
  boost::asio::io_context io;
  SupervisorOptions opts;
  opts.run_dir = run_dir;
  opts.job = std::move(job).value();
  opts.resume_run = resume;
  opts.from_step = from_step;
  opts.nodes = nodes;
  opts.node_id = node_id;
  opts.leader_addr = leader;
  opts.cluster_port = cluster_port;
  Supervisor supervisor(&io, std::move(opts));
  Status s = supervisor.Start();
  if (!s.ok()) {
    spdlog::error("{}", s.ToString());
    return s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kFailedPrecondition ||
                   s.code() == StatusCode::kNotFound
               ? kDaemonExitUsage
               : kDaemonExitFailed;
  }
  io.run();
  return supervisor.exit_code();
}
