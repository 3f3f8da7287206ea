// The rule of sdpa_fallback.h: where standard attention leaves SDPA's math backend for the
// log-sum-exp paths' kernel, and where that kernel repeats K and V. Read by the engine and the planner.
// defines: sdpa_has_only_math, kernel_repeats_kv
#include "engine/layout/sdpa_fallback.h"

namespace odyssey {

bool sdpa_has_only_math(const LseKernelQuery& q, int64_t q_heads, int64_t kv_heads) {
  return q.cuda && !q.half_precision && q_heads > kv_heads;
}

bool kernel_repeats_kv(LseKernel k, int64_t q_heads, int64_t kv_heads) {
  return k == LseKernel::CudaEfficient && q_heads > kv_heads;
}

}  // namespace odyssey
