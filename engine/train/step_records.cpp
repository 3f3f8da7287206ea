// Step records to rank 0: a flat little-endian byte form of PhaseRecord, PhaseEdge and DeviceSpan,
// and the all-gather that carries it. defines: EdgeRecord::view, EdgeBuffer, gather_step_records,
// serialize_step_records, deserialize_step_records
#include "engine/train/step_records.h"

#include <cstring>
#include <stdexcept>

#include "engine/telemetry/memory_tracker.h"

namespace odyssey {
namespace {

constexpr uint32_t kMagic = 0x4f445352;  // "ODSR"

class ByteWriter {
 public:
  explicit ByteWriter(std::string& out) : out_(out) {}
  template <typename T>
  void put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    out_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void put_string(const std::string& s) {
    put(static_cast<uint32_t>(s.size()));
    out_.append(s);
  }

 private:
  std::string& out_;
};

class ByteReader {
 public:
  explicit ByteReader(const std::string& in) : in_(in) {}
  template <typename T>
  T get() {
    T v;
    need(sizeof v);
    std::memcpy(&v, in_.data() + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }
  std::string get_string() {
    const uint32_t n = get<uint32_t>();
    need(n);
    std::string s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  bool done() const { return pos_ == in_.size(); }

 private:
  void need(size_t n) const {
    if (pos_ + n > in_.size())
      throw std::runtime_error("step records: truncated at byte " + std::to_string(pos_) + " of " +
                               std::to_string(in_.size()));
  }
  const std::string& in_;
  size_t pos_ = 0;
};

}  // namespace

const PhaseEdge& EdgeRecord::view() {
  edge.path = &path;
  return edge;
}

void EdgeBuffer::attach(PhaseRecorder& recorder) {
  recorder.add_edge_sink([this](const PhaseEdge& e) {
    if (!capture_) return;
    EdgeRecord r;
    r.edge = e;
    r.path = e.path ? *e.path : std::string();
    r.edge.path = nullptr;
    edges_.push_back(std::move(r));
  });
  recorder.add_span_sink([this](const DeviceSpan& span) {
    if (capture_) spans_.push_back(span);
  });
}

std::vector<EdgeRecord> EdgeBuffer::take() { return std::exchange(edges_, {}); }

std::vector<DeviceSpan> EdgeBuffer::take_spans() { return std::exchange(spans_, {}); }

std::string serialize_step_records(const RankStepRecords& in) {
  std::string out;
  ByteWriter w(out);
  w.put(kMagic);
  w.put(static_cast<uint64_t>(in.records.size()));
  for (const PhaseRecord& r : in.records) {
    w.put(static_cast<int32_t>(r.rank));
    w.put(r.step);
    w.put(static_cast<int32_t>(r.depth));
    w.put_string(r.path);
    w.put(r.t_begin_s);
    w.put(r.t_end_s);
    for (int64_t v : {r.device_begin, r.device_end, r.device_peak, r.host_begin, r.host_end, r.host_peak}) w.put(v);
    w.put(r.category_at_peak);
    w.put(static_cast<uint8_t>(r.unwound));
  }
  w.put(static_cast<uint64_t>(in.edges.size()));
  for (const EdgeRecord& e : in.edges) {
    w.put(static_cast<int32_t>(e.edge.rank));
    w.put(e.edge.step);
    w.put(static_cast<int32_t>(e.edge.depth));
    w.put(static_cast<uint8_t>(e.edge.begin));
    w.put_string(e.path);
    w.put(e.edge.t_s);
    w.put(e.edge.device_bytes);
    w.put(e.edge.host_bytes);
    w.put(e.edge.category_bytes);
  }
  w.put(static_cast<uint64_t>(in.spans.size()));
  for (const DeviceSpan& d : in.spans) {
    w.put(static_cast<int32_t>(d.rank));
    w.put(d.step);
    w.put_string(d.name);
    w.put_string(d.category);
    w.put_string(d.track);
    w.put(d.t_begin_s);
    w.put(d.t_end_s);
    w.put(d.bytes);
  }
  return out;
}

RankStepRecords deserialize_step_records(const std::string& bytes) {
  ByteReader r(bytes);
  if (r.get<uint32_t>() != kMagic) throw std::runtime_error("step records: wrong magic");
  RankStepRecords out;
  out.records.resize(r.get<uint64_t>());
  for (PhaseRecord& p : out.records) {
    p.rank = r.get<int32_t>();
    p.step = r.get<int64_t>();
    p.depth = r.get<int32_t>();
    p.path = r.get_string();
    p.t_begin_s = r.get<double>();
    p.t_end_s = r.get<double>();
    for (int64_t* v : {&p.device_begin, &p.device_end, &p.device_peak, &p.host_begin, &p.host_end, &p.host_peak})
      *v = r.get<int64_t>();
    p.category_at_peak = r.get<decltype(p.category_at_peak)>();
    p.unwound = r.get<uint8_t>() != 0;
  }
  out.edges.resize(r.get<uint64_t>());
  for (EdgeRecord& e : out.edges) {
    e.edge.rank = r.get<int32_t>();
    e.edge.step = r.get<int64_t>();
    e.edge.depth = r.get<int32_t>();
    e.edge.begin = r.get<uint8_t>() != 0;
    e.path = r.get_string();
    e.edge.t_s = r.get<double>();
    e.edge.device_bytes = r.get<int64_t>();
    e.edge.host_bytes = r.get<int64_t>();
    e.edge.category_bytes = r.get<decltype(e.edge.category_bytes)>();
  }
  out.spans.resize(r.get<uint64_t>());
  for (DeviceSpan& d : out.spans) {
    d.rank = r.get<int32_t>();
    d.step = r.get<int64_t>();
    d.name = r.get_string();
    d.category = r.get_string();
    d.track = r.get_string();
    d.t_begin_s = r.get<double>();
    d.t_end_s = r.get<double>();
    d.bytes = r.get<int64_t>();
  }
  if (!r.done()) throw std::runtime_error("step records: trailing bytes");
  return out;
}

std::vector<RankStepRecords> gather_step_records(const RankContext& ctx, RankStepRecords mine) {
  std::vector<RankStepRecords> all;
  if (ctx.world_size == 1 || ctx.emulated) {
    all.push_back(std::move(mine));
    return all;
  }
  const std::string bytes = serialize_step_records(mine);
  const auto on_device = [&](at::ScalarType t) { return at::TensorOptions().dtype(t).device(ctx.device); };
  CategoryScope category(MemCategory::Other);                            // between steps: no step peak sees these
  at::Tensor sizes = at::empty({ctx.world_size}, on_device(at::kLong));  // [W] bytes per rank
  at::Tensor my_size = at::full({1}, static_cast<int64_t>(bytes.size()), on_device(at::kLong));
  ctx.world->all_gather(sizes, my_size);
  const at::Tensor host_sizes = sizes.cpu();
  int64_t longest = 0;
  for (int k = 0; k < ctx.world_size; ++k) longest = std::max(longest, host_sizes[k].item<int64_t>());
  at::Tensor mine_bytes = at::zeros({longest}, at::TensorOptions().dtype(at::kByte));  // [longest] on the CPU
  std::memcpy(mine_bytes.data_ptr(), bytes.data(), bytes.size());
  at::Tensor mine_dev = mine_bytes.to(ctx.device);
  at::Tensor gathered = at::empty({ctx.world_size * longest}, on_device(at::kByte));  // [W x longest]
  ctx.world->all_gather(gathered, mine_dev);
  if (ctx.rank != 0) return all;
  const at::Tensor host = gathered.cpu();
  const char* base = static_cast<const char*>(host.data_ptr());
  for (int k = 0; k < ctx.world_size; ++k)
    all.push_back(deserialize_step_records(std::string(base + k * longest, host_sizes[k].item<int64_t>())));
  return all;
}

}  // namespace odyssey
