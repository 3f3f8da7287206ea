// CRC-32 of byte ranges, for checkpoint files: LibTorch's own slicing-by-16 implementation (the
// one its zip serializer uses), wrapped so that exactly one translation unit includes it.
// defines: crc32_update
#pragma once

#include <cstddef>
#include <cstdint>

namespace odyssey {

/// CRC-32 (IEEE 802.3 polynomial, as zlib) of `bytes` continuing from `crc` (0 to start).
/// Usage: uint32_t c = crc32_update(0, header, n); c = crc32_update(c, data, m);
uint32_t crc32_update(uint32_t crc, const void* bytes, size_t size);

}  // namespace odyssey
