// Private: the block-scaled casts of block_quantize.cpp (MXFP8, 1 x 128 and 128 x 128 blocks),
// vectorised in bulk_convert.cpp with the span kernels of bulk_kernels.hpp. Each gives exactly what
// the element layer gives (core::cast_view_block, core::tile_amax + core::block_scale +
// core::cast_element): the per-block amax is the same max of amax bits, the scales come from the
// same core functions, and each element is the span kernel's cast with its block's multiplier,
// which the tests prove equal to core::cast_element for every input.
#pragma once

#include <cstddef>
#include <cstdint>

#include "fp8emu/core/cast.hpp"
#include "fp8emu/emulation/block_quantize.hpp"
#include "fp8emu/emulation/quantize.hpp"

namespace fp8emu::emu::detail {

/// Every block of the K-major view of the row-major [rows, cols] input x (row-wise: view rows are
/// x's rows, K = cols; column-wise: view rows are x's columns, K = rows), as core::cast_view_block
/// casts it, into q (a make_block_record of that shape: codes [n, K], scale_inv [n, nb], e8m0 for
/// MXFP8 rules). Returns the counts (count = n * K). OpenMP inside; thread-count invariant.
QuantizeStats cast_view_blocks(const float* x, int rows, int cols, bool rowwise, const core::BlockRule& rule,
                               BlockQuantized& q);

/// quantize_block_2d's steps 1-2: each tile x tile tile's amax (core::tile_amax) and scale
/// (core::block_scale; scale_inv into tile_scale_inv [ceil(rows/tile), ceil(cols/tile)]), then the
/// row-wise codes [rows, cols], each element by its tile's scale. Returns the counts.
QuantizeStats cast_tiles(const float* x, int rows, int cols, int tile, Format fmt, bool pow2, float epsilon,
                         float* tile_scale_inv, std::uint8_t* codes);

/// The E2M1 codes of x [n] under one multiplier: q[i] = core::cast_element(x[i], mult, E2M1) (the
/// code of RN(x * mult) by core::e2m1_code_satfinite), its counts added to `counts` as
/// core::count_element adds them. Vectorised (target clones), no branches; e2m1_span.cpp.
void cast_e2m1_span(const float* x, std::size_t n, float mult, std::uint8_t* q, core::CastCounts& counts);

}  // namespace fp8emu::emu::detail
