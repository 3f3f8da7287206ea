// The one translation unit that includes caffe2/serialize/crc_alt.h: that header defines its
// functions and lookup table without `inline`, so a second includer would break the link.
// defines: crc32_update
#include "engine/train/checksum.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-function"
#include <caffe2/serialize/crc_alt.h>
#pragma GCC diagnostic pop

namespace odyssey {

uint32_t crc32_update(uint32_t crc, const void* bytes, size_t size) { return crc32_fast(bytes, size, crc); }

}  // namespace odyssey
