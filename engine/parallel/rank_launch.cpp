// Rank launch: group layout, RankContext over a store (Gloo/NCCL), in-process rank threads with
// error propagation, torchrun's environment and TCPStore, rank emulation's context.
// defines: layout_of, comm_options, make_rank_context, make_emulated_rank_context,
//          make_solo_rank_context, run_rank_threads, torchrun_env, check_torchrun_world, connect_job_store,
//          join_torchrun_rank, join_torchrun
#include "engine/parallel/rank_launch.h"

#include <net/if.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>
#include <vector>

#include <c10/util/Logging.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "engine/parallel/emulated_comm.h"
#include "engine/parallel/store_deadline.h"
#include "engine/telemetry/cuda_runtime.h"
#include "engine/parallel/process_group_comm.h"
#include "engine/telemetry/memory_tracker.h"

#if defined(ODYSSEY_WITH_CUDA)
#include <ATen/cuda/CUDAContextLight.h>
#endif

namespace odyssey {
namespace {

// c10d's store logs each connection it retries with the c10::Error it caught, whose text carries
// LibTorch's C++ stack (34 "frame #N" lines a retry). Odyssey's messages name the failure; the
// stacks are no user's to read. Set once, before main.
const bool kNoLibTorchStacks = [] {
  c10::SetStackTraceFetcher([] { return std::string(); });
  return true;
}();

std::shared_ptr<Comm> make_group(const c10::intrusive_ptr<c10d::Store>& store, const std::string& name, int index,
                                 int member, int size, int global_rank, at::Device device, const CommOptions& options) {
  if (size == 1) return std::make_shared<SoloComm>(name);
  GroupSpec spec;
  spec.name = name;
  spec.instance = name == "world" ? name : name + "." + std::to_string(index);
  spec.rank = member;
  spec.size = size;
  spec.global_rank = global_rank;
  spec.timeout = options.timeout;
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>(spec.instance, store);
  if (device.is_cuda() && !options.shared_device)
    return std::make_shared<NcclComm>(prefixed, spec, device, options.abort);
  return std::make_shared<GlooComm>(prefixed, spec, options.abort, options.gloo_hostname, options.gloo_interface);
}

int parse_env_int(const char* name, const char* value, int min_value) {
  constexpr long kMaxValue = 1 << 20;  // ranks, ports and restarts all lie far below
  const std::string text = value;
  // digits only: std::stol would also take " 2" or "+0"
  const bool digits = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
  try {
    if (digits) {
      const long v = std::stol(text);
      if (v >= min_value && v <= kMaxValue) return static_cast<int>(v);
    }
  } catch (const std::exception&) {
  }
  throw std::invalid_argument(std::string("torchrun environment: ") + name + "=" + text +
                              " must be a whole number from " + std::to_string(min_value) + " to " +
                              std::to_string(kMaxValue));
}

bool is_loopback(const std::string& addr) { return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1"; }

}  // namespace

RankLayout layout_of(int rank, int world_size, int sp_size) {
  if (world_size < 1 || sp_size < 1 || world_size % sp_size != 0)
    throw std::invalid_argument("rank layout: parallel.world_size = " + std::to_string(world_size) +
                                " must be a positive multiple of parallel.ulysses_degree = " + std::to_string(sp_size));
  if (rank < 0 || rank >= world_size)
    throw std::invalid_argument("rank layout: rank " + std::to_string(rank) + " is outside [0, " +
                                std::to_string(world_size) + ")");
  RankLayout l;
  l.rank = rank;
  l.world_size = world_size;
  l.sp_size = sp_size;
  l.sp_group = rank / sp_size;  // contiguous blocks [i*P, (i+1)*P) share one sequence
  l.sp_rank = rank % sp_size;
  l.dp_size = world_size / sp_size;
  l.dp_group = rank % sp_size;  // strided: same sequence shard position, different sequences
  l.dp_rank = rank / sp_size;
  return l;
}

namespace {

/// The UUID of CUDA device `index` as nvidia-smi prints it ("GPU-" and 32 hex digits in groups of
/// 8-4-4-4-12): what names one physical GPU however CUDA_VISIBLE_DEVICES numbered it.
std::string gpu_uuid(c10::DeviceIndex index) {
#if defined(ODYSSEY_WITH_CUDA)
  const cudaDeviceProp* props = at::cuda::getDeviceProperties(index);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string text = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) text += '-';
    const auto byte = static_cast<unsigned char>(props->uuid.bytes[i]);
    text += kHex[byte >> 4];
    text += kHex[byte & 15];
  }
  return text;
#else
  throw std::runtime_error("CUDA device " + std::to_string(index) + ": this build of Odyssey has no CUDA");
#endif
}

}  // namespace

bool any_gpu_shared(const std::vector<std::string>& gpus) {
  std::vector<std::string> named;
  for (const std::string& g : gpus)
    if (!g.empty()) named.push_back(g);
  std::sort(named.begin(), named.end());
  return std::adjacent_find(named.begin(), named.end()) != named.end();
}

bool ranks_share_gpus(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size, const std::string& gpu) {
  const auto key = [](int r) { return "odyssey/gpu_uuid/" + std::to_string(r); };
  store->set(key(rank), std::vector<uint8_t>(gpu.begin(), gpu.end()));
  std::vector<std::string> gpus;
  for (int r = 0; r < world_size; ++r) {
    try {
      const std::vector<uint8_t> value = store->get(key(r));  // waits for rank r's, up to the store's timeout
      gpus.emplace_back(value.begin(), value.end());
    } catch (const c10::Error&) {
      // The first wait of the job's ranks for one another: name the ranks that never wrote
      std::string missing;
      for (int m = 0; m < world_size; ++m) {
        bool there = false;
        try {
          there = store->check({key(m)});
        } catch (const c10::Error&) {  // the store itself is gone: every rank counts as missing
        }
        if (!there) missing += (missing.empty() ? "" : ", ") + std::to_string(m);
      }
      throw CommError("rank " + std::to_string(rank) + ": ranks " + missing +
                      " never reached the collective groups' set-up (they failed or hung before it, "
                      "see their output)");
    }
  }
  return any_gpu_shared(gpus);
}

CommOptions comm_options(const ParallelConfig& parallel) {
  if (!(parallel.timeout_s > 0))
    throw std::invalid_argument("parallel.timeout_s = " + std::to_string(parallel.timeout_s) + " must be positive");
  CommOptions o;
  // Whole milliseconds, rounded up and at least 1: c10d and Gloo read a timeout of 0 ms as none at
  // all, so a rounded-down sub-millisecond timeout would make every wait endless.
  o.timeout =
      std::chrono::milliseconds(std::max<int64_t>(1, static_cast<int64_t>(std::ceil(parallel.timeout_s * 1000.0))));
  o.abort = std::make_shared<AbortSignal>();
  return o;
}

RankContext make_rank_context(const c10::intrusive_ptr<c10d::Store>& store, int rank, const ParallelConfig& parallel,
                              at::Device device, const CommOptions& options) {
  const RankLayout l =
      layout_of(rank, static_cast<int>(parallel.world_size), static_cast<int>(parallel.ulysses_degree));
  RankContext ctx;
  ctx.rank = l.rank;
  ctx.world_size = l.world_size;
  ctx.sp_rank = l.sp_rank;
  ctx.sp_size = l.sp_size;
  ctx.dp_rank = l.dp_rank;
  ctx.dp_size = l.dp_size;
  ctx.device = device;
  // Same creation order on every rank (sp, dp, world), so no two ranks wait on each other's groups.
  // World last: rank 0, its member 0, leaves a setup barrier last (BackendComm::
  // wait_for_every_member), so it leaves the world's only after every rank has made all of its
  // groups and is done with the store; under torchrun rank 0's process may serve that store.
  ctx.sp = make_group(store, "sp", l.sp_group, l.sp_rank, l.sp_size, l.rank, device, options);
  ctx.dp = make_group(store, "dp", l.dp_group, l.dp_rank, l.dp_size, l.rank, device, options);
  ctx.world = make_group(store, "world", 0, l.rank, l.world_size, l.rank, device, options);
  return ctx;
}

RankContext make_emulated_rank_context(const ParallelConfig& parallel, at::Device device) {
  const RankLayout l = layout_of(0, static_cast<int>(parallel.world_size), static_cast<int>(parallel.ulysses_degree));
  RankContext ctx;
  ctx.rank = 0;
  ctx.world_size = l.world_size;
  ctx.sp_rank = 0;
  ctx.sp_size = l.sp_size;
  ctx.dp_rank = 0;
  ctx.dp_size = l.dp_size;
  ctx.emulated = true;
  ctx.device = device;
  ctx.world = std::make_shared<EmulatedComm>("world", l.world_size);
  ctx.sp = std::make_shared<EmulatedComm>("sp", l.sp_size);
  ctx.dp = std::make_shared<EmulatedComm>("dp", l.dp_size);
  return ctx;
}

RankContext make_solo_rank_context(at::Device device) {
  RankContext ctx;
  ctx.device = device;
  return ctx;
}

void run_rank_threads(const ParallelConfig& parallel, at::Device device, const std::function<void(RankContext&)>& fn) {
  const int world = static_cast<int>(parallel.world_size);
  layout_of(0, world, static_cast<int>(parallel.ulysses_degree));  // validates before any thread starts
  CommOptions options = comm_options(parallel);
  auto store = c10::make_intrusive<c10d::HashStore>();
  store->setTimeout(options.timeout);

  std::mutex errors_mutex;
  std::vector<std::string> errors(world);
  std::vector<std::thread> threads;
  threads.reserve(world);
  // Every thread starts first and waits here: one that cannot start (the process's limit on
  // threads or address space) ends the launch before any rank joins its groups, where the others
  // would wait for it until parallel.timeout_s. Whatever happens, the started ones are released
  // and joined (a joinable std::thread destroyed by an exception ends the process).
  std::mutex start_mutex;
  std::condition_variable start_cv;
  bool released = false;
  for (int r = 0; r < world; ++r) {
    try {
      threads.emplace_back([&, r] {
        {
          std::unique_lock<std::mutex> lock(start_mutex);
          start_cv.wait(lock, [&] { return released; });
        }
        if (options.abort->raised()) return;  // a rank thread did not start: no group to join
        RankScope rank_scope(r);              // the memory tracker charges this thread's allocations to rank r
        const at::Device rank_device =
            device.is_cuda()
                ? at::Device(at::kCUDA, static_cast<c10::DeviceIndex>((device.has_index() ? device.index() : 0) + r))
                : device;
        std::unique_ptr<RankContext> ctx;  // (an optional here draws GCC 12's false -Wmaybe-uninitialized)
        try {
          RankContext made = world == 1 ? make_solo_rank_context(rank_device)
                                        : make_rank_context(store, r, parallel, rank_device, options);
          made.slot = r;  // rank thread r counts in tracker slot r
          ctx = std::make_unique<RankContext>(std::move(made));
          fn(*ctx);
        } catch (const std::exception& e) {
          options.abort->raise(r, e.what());  // before ctx's groups go away: peers see "rank r failed"
          std::lock_guard<std::mutex> lock(errors_mutex);
          errors[r] = e.what();
        } catch (...) {
          options.abort->raise(r, "unknown exception");
          std::lock_guard<std::mutex> lock(errors_mutex);
          errors[r] = "unknown exception";
        }
        ctx.reset();  // destroys this rank's groups on its own thread
      });
    } catch (const std::exception& e) {  // std::system_error (EAGAIN), or std::bad_alloc for its state
      try {
        const std::string why = "cannot start the thread of rank " + std::to_string(r) + " of " +
                                std::to_string(world) + " (" + e.what() +
                                "): the process's limit on threads or memory (ulimit -u, ulimit -v) is too low "
                                "for its rank threads";
        std::lock_guard<std::mutex> lock(errors_mutex);
        errors[r] = why;
        options.abort->raise(r, why);
      } catch (const std::exception&) {  // no memory for the words: the started ranks time out instead
      }
      break;
    }
  }
  {
    std::lock_guard<std::mutex> lock(start_mutex);
    released = true;
  }
  start_cv.notify_all();
  for (auto& t : threads) t.join();
  if (options.abort->raised()) {
    const int first = options.abort->rank();
    throw RankError(first, "rank " + std::to_string(first) + ": " + errors[first]);
  }
}

std::string TorchrunEnv::store_address() const { return master_addr + ":" + std::to_string(master_port); }

std::optional<TorchrunEnv> torchrun_env() {
  const char* rank = std::getenv("RANK");
  const char* world = std::getenv("WORLD_SIZE");
  if (!rank && !world) return std::nullopt;
  if (!rank || !world)
    throw std::invalid_argument(std::string("torchrun environment: ") + (rank ? "WORLD_SIZE" : "RANK") +
                                " is unset while " + (rank ? "RANK" : "WORLD_SIZE") + " is set; set both");
  TorchrunEnv env;
  env.world_size = parse_env_int("WORLD_SIZE", world, 1);
  env.rank = parse_env_int("RANK", rank, 0);
  if (env.rank >= env.world_size)
    throw std::invalid_argument("torchrun environment: RANK=" + std::to_string(env.rank) +
                                " must be below WORLD_SIZE=" + std::to_string(env.world_size));
  if (const char* local = std::getenv("LOCAL_RANK")) {
    env.local_rank = parse_env_int("LOCAL_RANK", local, 0);
  } else if (env.world_size > 1) {
    // A launcher other than torchrun (srun, mpirun, a script) that sets RANK and WORLD_SIZE alone:
    // every process of a node would take its first GPU.
    throw std::invalid_argument(
        "torchrun environment: LOCAL_RANK is unset while WORLD_SIZE=" + std::to_string(env.world_size) +
        ": set it to the process's index on its node (torchrun sets it; under srun "
        "LOCAL_RANK=$SLURM_LOCALID), or every process of a node takes its first GPU");
  }
  if (const char* local_world = std::getenv("LOCAL_WORLD_SIZE"))
    env.local_world_size = parse_env_int("LOCAL_WORLD_SIZE", local_world, 1);
  if (env.local_rank >= env.local_world_size && std::getenv("LOCAL_WORLD_SIZE"))
    throw std::invalid_argument("torchrun environment: LOCAL_RANK=" + std::to_string(env.local_rank) +
                                " must be below LOCAL_WORLD_SIZE=" + std::to_string(env.local_world_size));
  if (const char* addr = std::getenv("MASTER_ADDR")) {
    if (*addr == '\0')
      throw std::invalid_argument(
          "torchrun environment: MASTER_ADDR is set but empty: name the host that serves the "
          "job's store (rank 0's), or unset it for 127.0.0.1");
    env.master_addr = addr;
  }
  if (const char* port = std::getenv("MASTER_PORT")) {
    env.master_port = parse_env_int("MASTER_PORT", port, 1);
    if (env.master_port > 65535)
      throw std::invalid_argument("torchrun environment: MASTER_PORT=" + std::string(port) + " must be at most 65535");
  }
  if (const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE")) {
    const std::string v = agent;
    if (v == "True" || v == "true" || v == "1")
      env.use_agent_store = true;
    else if (!(v == "False" || v == "false" || v == "0" || v.empty()))
      throw std::invalid_argument("torchrun environment: TORCHELASTIC_USE_AGENT_STORE=" + v + " must be True or False");
  }
  if (const char* restarts = std::getenv("TORCHELASTIC_RESTART_COUNT"))
    env.restart_count = parse_env_int("TORCHELASTIC_RESTART_COUNT", restarts, 0);
  return env;
}

void check_gloo_interface() {
  const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
  // Gloo would stop in its device setup with "Unable to find address for: NAME", naming no variable
  if (ifname != nullptr && ::if_nametoindex(ifname) == 0)
    throw std::invalid_argument(std::string("torchrun environment: GLOO_SOCKET_IFNAME=") + ifname +
                                " is no network interface of this host (see `ip link`)");
}

void check_torchrun_world(const TorchrunEnv& env, const ParallelConfig& parallel) {
  if (parallel.emulate)  // else each process would run a real rank, and measure no emulated one
    throw std::invalid_argument(
        "torchrun environment (RANK=" + std::to_string(env.rank) + ", WORLD_SIZE=" + std::to_string(env.world_size) +
        "): parallel.emulate = true runs rank 0 of the job alone, in one process started without torchrun; "
        "under torchrun every process is a real rank (unset RANK and WORLD_SIZE to emulate, or set "
        "parallel.emulate = false to run the job)");
  if (env.world_size != parallel.world_size)
    throw std::invalid_argument(
        "torchrun environment: WORLD_SIZE=" + std::to_string(env.world_size) +
        " must equal parallel.world_size = " + std::to_string(parallel.world_size) +
        " (set it in the preset or with --set parallel.world_size=" + std::to_string(env.world_size) + ")");
}

c10::intrusive_ptr<c10d::Store> connect_job_store(const TorchrunEnv& env, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<uint16_t>(env.master_port);
  store_options.isServer = env.rank == 0 && !env.use_agent_store;
  store_options.numWorkers = env.world_size;
  store_options.waitWorkers = true;  // a client only counts itself in; the server (rank 0) waits for all
  store_options.timeout = timeout;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string address = env.store_address();
  c10::intrusive_ptr<c10d::TCPStore> tcp_store;
  try {
    // A client connects within `timeout`, then waits for the server's answer to its first request,
    // unbounded: a stopped rank 0 (the kernel accepts for it) would hold it forever.
    std::optional<StoreDeadline> deadline;
    if (!store_options.isServer) deadline.emplace(store_deadline_for(timeout), "this process's joining", address);
    tcp_store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, store_options);
  } catch (const c10::Error& e) {
    const auto waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::string serves =
        env.use_agent_store ? "The torchrun agent serves the store"
        : store_options.isServer
            ? "This process serves the store and waits for all " + std::to_string(env.world_size) +
                  " processes of WORLD_SIZE: one has not started, or it ended first (see its output)"
            : "Rank 0's process serves the store: it has not started, or it ended first (see its output)";
    std::string text = e.what_without_backtrace();
    if (const size_t cut = text.find('\n'); cut != std::string::npos) text.resize(cut);
    if (!text.empty() && text.back() != '.') text += '.';
    // Something answered, and not as a store does (c10d's ping got another value back): another
    // program holds the port, not a process of this job that has yet to start.
    if (!store_options.isServer && text.find("Ping failed") != std::string::npos)
      throw CommError("torchrun job: rank " + std::to_string(env.rank) + " could not join the job's store at " +
                      address + ": " + text + " Another program (no torchrun job's store) answers on that port: " +
                      "choose another MASTER_PORT, or stop that program");
    // Rank 0 cannot serve: another process holds the port (a second RANK=0 of this job, another job
    // on MASTER_PORT). The launch's to change, not a wait that ran out.
    if (store_options.isServer &&
        (text.find("EADDRINUSE") != std::string::npos || text.find("ddress already in use") != std::string::npos))
      throw std::invalid_argument("torchrun job: rank 0 cannot serve the job's store at " + address +
                                  ": another process already serves one on that port (a second process started "
                                  "with RANK=0, or another job on MASTER_PORT=" +
                                  std::to_string(env.master_port) +
                                  "); each process needs its own RANK, each job its own MASTER_PORT");
    throw CommError("torchrun job: rank " + std::to_string(env.rank) + " could not join the job's store at " + address +
                    " in " + std::to_string(static_cast<int64_t>(waited + 0.5)) + " s: " + text + " " + serves +
                    "; parallel.timeout_s bounds the wait");
  }
  if (env.use_agent_store)  // the agent's store outlives restarts: one key space per attempt
    return c10::make_intrusive<c10d::PrefixStore>("/worker/attempt_" + std::to_string(env.restart_count), tcp_store);
  return tcp_store;
}

TorchrunRank join_torchrun_rank(const TorchrunEnv& env, const ParallelConfig& parallel, at::Device device,
                                c10::intrusive_ptr<c10d::Store> store) {
  check_torchrun_world(env, parallel);
  CommOptions options = comm_options(parallel);
  // `device` is the local rank's GPU (resolve_device: local rank modulo the GPUs it sees); ranks
  // whose GPUs are one device share it, over Gloo (CommOptions::shared_device, ranks_share_gpus).
  const at::Device rank_device = device;
  TorchrunRank joined;
  joined.abort = options.abort;
  if (env.world_size == 1) {
    joined.ctx = make_solo_rank_context(rank_device);
    return joined;
  }
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME")) {
    check_gloo_interface();  // agreed before (odyssey train); again for the other commands
    options.gloo_interface = ifname;
  }
  options.gloo_hostname = is_loopback(env.master_addr) ? "127.0.0.1" : "";
  joined.store = store ? std::move(store) : connect_job_store(env, options.timeout);
  {  // the groups' rendezvous goes through the store (Gloo's and NCCL's pairs)
    const StoreDeadline deadline(store_deadline_for(options.timeout),
                                 "the collective groups' set-up (the GPUs' exchange, the groups, NCCL's connect)",
                                 env.store_address());
    options.shared_device =
        ranks_share_gpus(joined.store, env.rank, env.world_size, device.is_cuda() ? gpu_uuid(device.index()) : "");
    joined.ctx = make_rank_context(joined.store, env.rank, parallel, rank_device, options);
  }
  return joined;
}

RankContext join_torchrun(const TorchrunEnv& env, const ParallelConfig& parallel, at::Device device) {
  return join_torchrun_rank(env, parallel, device).ctx;
}

}  // namespace odyssey
