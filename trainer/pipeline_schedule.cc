#include "trainer/pipeline_schedule.h"

#include <algorithm>
#include <cstddef>

namespace holdfast {

std::string DescribePipeInstr(const PipeInstr& instr) {
  switch (instr.op) {
    case PipeOp::kForward:
      return "F" + std::to_string(instr.micro);
    case PipeOp::kBackward:
      return "B" + std::to_string(instr.micro);
    case PipeOp::kComm:
      break;
  }
  std::string out;
  auto add = [&out](const char* what, int micro) {
    if (micro < 0) return;
    if (!out.empty()) out += " + ";
    out += what + std::to_string(micro);
  };
  add("send act ", instr.send_act);
  add("send grad ", instr.send_grad);
  add("recv act ", instr.recv_act);
  add("recv grad ", instr.recv_grad);
  return out.empty() ? "nothing" : out;
}

Result<std::vector<PipeInstr>> OneFOneBSchedule(int stage, int stages, int micro_batches) {
  if (stages < 1 || stage < 0 || stage >= stages) {
    return InvalidArgumentError("pipeline stage " + std::to_string(stage) + " of " + std::to_string(stages) +
                                ": a stage is in [0, stages) and there is at least one");
  }
  if (micro_batches < 1) {
    return InvalidArgumentError("a pipeline step needs at least one micro-batch, got " +
                                std::to_string(micro_batches));
  }
  const bool first = stage == 0, last = stage == stages - 1;
  const int warm = std::min(stages - stage - 1, micro_batches);
  const int steady = micro_batches - warm;
  std::vector<PipeInstr> p;
  auto compute = [&p](PipeOp op, int micro) {
    PipeInstr i;
    i.op = op;
    i.micro = micro;
    p.push_back(i);
  };
  auto comm = [&p](int send_act, int recv_grad, int send_grad, int recv_act) {
    PipeInstr i;
    i.send_act = send_act;
    i.recv_grad = recv_grad;
    i.send_grad = send_grad;
    i.recv_act = recv_act;
    if (send_act >= 0 || recv_grad >= 0 || send_grad >= 0 || recv_act >= 0) p.push_back(i);
  };
  int fwd = 0, bwd = 0;
  for (int i = 0; i < warm; ++i, ++fwd) {
    if (!first) comm(-1, -1, -1, fwd);
    compute(PipeOp::kForward, fwd);
    if (!last) comm(fwd, -1, -1, -1);
  }
  if (steady > 0 && !first) comm(-1, -1, -1, fwd);
  for (int i = 0; i < steady; ++i, ++bwd) {
    compute(PipeOp::kForward, fwd);
    if (!last) comm(fwd, bwd, -1, -1);  // the output out, the oldest one's gradient in
    ++fwd;
    compute(PipeOp::kBackward, bwd);
    if (!first) comm(-1, -1, bwd, i + 1 < steady ? fwd : -1);  // the gradient out, the next input in
  }
  for (int i = 0; i < warm; ++i, ++bwd) {
    if (!last) comm(-1, bwd, -1, -1);
    compute(PipeOp::kBackward, bwd);
    if (!first) comm(-1, -1, bwd, -1);
  }
  return p;
}

namespace {

std::string Where(int stage, const std::vector<PipeInstr>& program, size_t pc) {
  return "stage " + std::to_string(stage) + " at instruction " + std::to_string(pc) + " (" +
         (pc < program.size() ? DescribePipeInstr(program[pc]) : std::string("done")) + ")";
}

// Whether b is a's counterpart: the same messages, crossed.
bool Counterparts(const PipeInstr& a, const PipeInstr& b) {
  return a.send_act == b.recv_act && a.recv_act == b.send_act && a.send_grad == b.recv_grad &&
         a.recv_grad == b.send_grad;
}

bool Sends(const PipeInstr& i) { return i.send_act >= 0 || i.send_grad >= 0; }

// A stage's program on its own: every micro-batch's forward, then its
// backward, once each; inputs received before the forward, outputs sent
// after it; gradients likewise; messages only to neighbours that exist.
Status CheckProgram(int stage, int stages, const std::vector<PipeInstr>& program, int micro_batches) {
  const std::string who = "stage " + std::to_string(stage) + " of " + std::to_string(stages);
  const bool first = stage == 0, last = stage == stages - 1;
  std::vector<int> forward(micro_batches, -1), backward(micro_batches, -1);
  std::vector<int> got_act(micro_batches, -1), sent_act(micro_batches, -1);
  std::vector<int> got_grad(micro_batches, -1), sent_grad(micro_batches, -1);
  auto note = [&](std::vector<int>& seen, int micro, int pc, const char* what) -> Status {
    if (micro < 0) return Status::Ok();
    if (micro >= micro_batches) {
      return InvalidArgumentError(who + ": " + what + " of micro-batch " + std::to_string(micro) + " of " +
                                  std::to_string(micro_batches));
    }
    if (seen[micro] >= 0) {
      return InvalidArgumentError(who + ": " + what + " of micro-batch " + std::to_string(micro) + " twice");
    }
    seen[micro] = pc;
    return Status::Ok();
  };
  for (size_t i = 0; i < program.size(); ++i) {
    const PipeInstr& in = program[i];
    const int pc = static_cast<int>(i);
    if (in.op == PipeOp::kForward) {
      HF_RETURN_IF_ERROR(note(forward, in.micro, pc, "forward"));
      continue;
    }
    if (in.op == PipeOp::kBackward) {
      HF_RETURN_IF_ERROR(note(backward, in.micro, pc, "backward"));
      continue;
    }
    const bool up = in.send_act >= 0 || in.recv_grad >= 0, down = in.send_grad >= 0 || in.recv_act >= 0;
    if (up == down) {
      return InvalidArgumentError(who + ", instruction " + std::to_string(pc) + " (" + DescribePipeInstr(in) +
                                  "): a message instruction talks to exactly one neighbour");
    }
    if ((up && last) || (down && first)) {
      return InvalidArgumentError(who + ", instruction " + std::to_string(pc) + " (" + DescribePipeInstr(in) +
                                  "): that neighbour does not exist");
    }
    HF_RETURN_IF_ERROR(note(sent_act, in.send_act, pc, "send of activations"));
    HF_RETURN_IF_ERROR(note(got_grad, in.recv_grad, pc, "receive of a gradient"));
    HF_RETURN_IF_ERROR(note(sent_grad, in.send_grad, pc, "send of a gradient"));
    HF_RETURN_IF_ERROR(note(got_act, in.recv_act, pc, "receive of activations"));
  }
  for (int m = 0; m < micro_batches; ++m) {
    const std::string mb = who + ", micro-batch " + std::to_string(m) + ": ";
    if (forward[m] < 0 || backward[m] < 0) return InvalidArgumentError(mb + "its forward or backward never runs");
    if (backward[m] < forward[m]) return InvalidArgumentError(mb + "backward before forward");
    if (!first && (got_act[m] < 0 || got_act[m] > forward[m])) {
      return InvalidArgumentError(mb + "its input is not received before its forward");
    }
    if (!last && (sent_act[m] < forward[m])) return InvalidArgumentError(mb + "its output is not sent after its forward");
    if (!last && (got_grad[m] < 0 || got_grad[m] > backward[m])) {
      return InvalidArgumentError(mb + "its output's gradient is not received before its backward");
    }
    if (!first && sent_grad[m] < backward[m]) {
      return InvalidArgumentError(mb + "its input's gradient is not sent after its backward");
    }
  }
  return Status::Ok();
}

}  // namespace

Result<PipelineSimulation> SimulatePipeline(const std::vector<std::vector<PipeInstr>>& programs, int micro_batches,
                                            double forward_cost, double backward_cost) {
  const int stages = static_cast<int>(programs.size());
  if (stages < 1 || micro_batches < 1) {
    return InvalidArgumentError("a pipeline simulation needs at least one stage and one micro-batch");
  }
  for (int s = 0; s < stages; ++s) HF_RETURN_IF_ERROR(CheckProgram(s, stages, programs[s], micro_batches));
  PipelineSimulation sim;
  sim.max_in_flight.assign(stages, 0);
  std::vector<size_t> pc(stages, 0);
  std::vector<double> clock(stages, 0.0);
  std::vector<int> in_flight(stages, 0);
  for (;;) {
    bool moved = false, done = true;
    for (int s = 0; s < stages; ++s) {
      const std::vector<PipeInstr>& prog = programs[s];
      while (pc[s] < prog.size() && prog[pc[s]].op != PipeOp::kComm) {
        const bool fwd = prog[pc[s]].op == PipeOp::kForward;
        clock[s] += fwd ? forward_cost : backward_cost;
        in_flight[s] += fwd ? 1 : -1;
        sim.max_in_flight[s] = std::max(sim.max_in_flight[s], in_flight[s]);
        ++pc[s];
        moved = true;
      }
      if (pc[s] >= prog.size()) continue;
      done = false;
      const PipeInstr& mine = prog[pc[s]];
      const int peer = mine.Peer(s);
      if (peer < s) continue;  // a pair is settled once, from its lower stage
      const std::vector<PipeInstr>& theirs = programs[peer];
      if (pc[peer] >= theirs.size() || theirs[pc[peer]].op != PipeOp::kComm || theirs[pc[peer]].Peer(peer) != s) {
        continue;  // the peer is computing, or waiting on its other neighbour
      }
      if (!Counterparts(mine, theirs[pc[peer]])) {
        if (!Sends(mine) && !Sends(theirs[pc[peer]])) {
          return FailedPreconditionError("the pipeline's programs deadlock: " + Where(s, prog, pc[s]) + " and " +
                                         Where(peer, theirs, pc[peer]) + " each wait to receive from the other");
        }
        return FailedPreconditionError("the pipeline's programs pair mismatching messages: " + Where(s, prog, pc[s]) +
                                       " meets " + Where(peer, theirs, pc[peer]));
      }
      clock[s] = clock[peer] = std::max(clock[s], clock[peer]);
      ++pc[s];
      ++pc[peer];
      moved = true;
    }
    if (done) break;
    if (!moved) {
      std::string stuck;
      for (int s = 0; s < stages; ++s) {
        if (pc[s] >= programs[s].size()) continue;
        if (!stuck.empty()) stuck += "; ";
        stuck += Where(s, programs[s], pc[s]);
      }
      return FailedPreconditionError("the pipeline's programs deadlock: " + stuck);
    }
  }
  sim.makespan = *std::max_element(clock.begin(), clock.end());
  const double busy = micro_batches * (forward_cost + backward_cost);
  sim.bubble = sim.makespan > 0 ? 1.0 - busy / sim.makespan : 0.0;
  return sim;
}

}  // namespace holdfast
