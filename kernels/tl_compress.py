"""TileLang compression kernel: fused magnitude 2:4 selection, values + int16 metadata, block loss.

Same results as the reference (bit exact values and metadata; loss equal up to float32 summation
order): ``mask = element_mask(blocks, operand)``, ``compress_blocks(blocks, mask, operand)``,
``block_loss(blocks, mask)`` (``hs_kernels.pruner`` / ``hs_kernels.compressor``).

One program per 64-token block: the token-major block is staged in shared memory; each 2:4 group
(K: 4 consecutive channels of a token; V: 4 consecutive tokens of a channel) keeps its 2
largest magnitudes (ties to the lower index, NaN largest: the reference's 6-comparison rank);
the kept values and the nibbles are packed in shared memory and written with coalesced copies
straight into pool slot ``slots[n]`` (skipped where ``slots[n] < 0``, so the same kernel computes
only the losses); the loss of every block is always written: per-group L1 of the two pruned elements,
summed per half row (one thread each), then per block (``loss_mode``: by a warp then one thread,
or by one thread; or per-group losses written out), float32.

Shapes fixed at compile time: operand, head_dim, dtype; the number of blocks and of pool slots are
symbolic. Imported only on CUDA (needs ``tilelang``); TileLang reads this file's source.
"""

import functools
import operator

import tilelang
import tilelang.language as T

BS = 64


def _kernel(operand: str, head_dim: int, dtype: str, threads: int = 128, loss_mode: str = "block"):
    d = head_dim
    n = T.dynamic("n_blocks")
    n_slots = T.dynamic("n_slots")
    rows, row_len = (BS, d) if operand == "k" else (d, BS)
    groups = row_len // 4
    words = row_len // 16
    acc = "float32"
    inf_bits = 0x7F80 if dtype == "bfloat16" else 0x7C00

    def get(x_s, r, e):  # operand-layout element (row r, position e) of the token-major block
        return x_s[r, e] if operand == "k" else x_s[e, r]

    def half_row_sum(buf, r, h):  # unrolled buf[r, h * G/2] + ... + buf[r, h * G/2 + G/2 - 1]
        half = groups // 2
        return functools.reduce(operator.add, [buf[r, h * half + gi] for gi in range(half)])

    def tree_sum(terms):  # balanced pairwise sum (shorter dependency chain than a serial one)
        while len(terms) > 1:
            terms = [terms[i] + terms[i + 1] if i + 1 < len(terms) else terms[i] for i in range(0, len(terms), 2)]
        return terms[0]

    def block_sum(buf):  # all rows x 2 half-row sums of the block
        return tree_sum([buf[r, h] for r in range(rows) for h in range(2)])

    per_lane = rows * 2 // 32

    def lane_sum(buf, lane):  # lane's share (per_lane consecutive half rows) of the flattened [rows, 2]
        return tree_sum([buf[(lane * per_lane + i) // 2, (lane * per_lane + i) % 2] for i in range(per_lane)])

    def warp_sum(buf):
        return tree_sum([buf[i] for i in range(32)])

    @T.prim_func
    def compress(
        blocks: T.Tensor((n, BS, d), dtype),
        slots: T.Tensor((n,), "int32"),
        values: T.Tensor((n_slots, rows, row_len // 2), dtype),
        meta: T.Tensor((n_slots, rows, words), "int16"),
        loss: T.Tensor((n, rows, groups) if loss_mode == "group" else (n,), acc),
    ):
        with T.Kernel(n, threads=threads) as bx:
            x_s = T.alloc_shared((BS, d), dtype)
            val_s = T.alloc_shared((rows, row_len // 2), dtype)
            nib_s = T.alloc_shared((rows, groups), "int32")
            meta_s = T.alloc_shared((rows, words), "int16")
            lg_s = T.alloc_shared((rows, groups), acc)
            lr_s = T.alloc_shared((rows, 2), acc)
            ws_s = T.alloc_shared((32,), acc)
            tx = T.get_thread_binding()

            T.copy(blocks[bx, 0:BS, 0:d], x_s)
            for r, gi in T.Parallel(rows, groups):
                # magnitudes compared as integer bit patterns |bits| (monotonic for IEEE halves),
                # clamped at +inf so that NaN ties with inf, as the reference's nan_to_num(inf)
                a0 = T.min(T.cast(T.reinterpret(get(x_s, r, gi * 4 + 0), "int16"), "int32") & 0x7FFF, inf_bits)
                a1 = T.min(T.cast(T.reinterpret(get(x_s, r, gi * 4 + 1), "int16"), "int32") & 0x7FFF, inf_bits)
                a2 = T.min(T.cast(T.reinterpret(get(x_s, r, gi * 4 + 2), "int16"), "int32") & 0x7FFF, inf_bits)
                a3 = T.min(T.cast(T.reinterpret(get(x_s, r, gi * 4 + 3), "int16"), "int32") & 0x7FFF, inf_bits)
                b01 = T.cast(a0 >= a1, "int32")
                b02 = T.cast(a0 >= a2, "int32")
                b03 = T.cast(a0 >= a3, "int32")
                b12 = T.cast(a1 >= a2, "int32")
                b13 = T.cast(a1 >= a3, "int32")
                b23 = T.cast(a2 >= a3, "int32")
                k0 = T.cast(3 - (b01 + b02 + b03) < 2, "int32")
                k1 = T.cast(b01 + 2 - (b12 + b13) < 2, "int32")
                k2 = T.cast(b02 + b12 + 1 - b23 < 2, "int32")
                # exactly two of k0..k3 are set: idx0 = first kept, idx1 = second kept
                idx0 = T.if_then_else(k0 == 1, 0, T.if_then_else(k1 == 1, 1, 2))
                idx1 = T.if_then_else(k0 + k1 == 2, 1, T.if_then_else(k0 + k1 + k2 == 2, 2, 3))
                nib_s[r, gi] = idx0 | (idx1 << 2)
                val_s[r, gi * 2] = get(x_s, r, gi * 4 + idx0)
                val_s[r, gi * 2 + 1] = get(x_s, r, gi * 4 + idx1)
                # L1 of the two pruned elements (p0 < p1: the complement of idx0, idx1), float32,
                # read by index like the kept values (a select over Let-bound floats read wrong on the H200)
                p0 = T.if_then_else(k0 == 0, 0, T.if_then_else(k1 == 0, 1, 2))
                p1 = T.if_then_else(k0 + k1 == 0, 1, T.if_then_else(k0 + k1 + k2 == 1, 2, 3))
                lg = (T.abs(T.cast(get(x_s, r, gi * 4 + p0), acc)) + T.abs(T.cast(get(x_s, r, gi * 4 + p1), acc)))
                if loss_mode == "group":
                    loss[bx, r, gi] = lg
                else:
                    lg_s[r, gi] = lg
            T.sync_threads()  # nib_s / lg_s are read across threads below
            for r, w in T.Parallel(rows, words):
                word = (nib_s[r, w * 4] | (nib_s[r, w * 4 + 1] << 4) | (nib_s[r, w * 4 + 2] << 8)
                        | (nib_s[r, w * 4 + 3] << 12))
                meta_s[r, w] = T.cast(T.if_then_else(word >= 32768, word - 65536, word), "int16")
            # per half-row sums, serial over the groups: rows * 2 >= 128 items, one or more per thread
            # (a parallel loop with fewer items than threads was mapped out of bounds)
            if loss_mode != "group":
                for r, h in T.Parallel(rows, 2):
                    lr_s[r, h] = half_row_sum(lg_s, r, h)
                T.sync_threads()
                if loss_mode == "block":  # one thread sums all half rows
                    if tx == 0:
                        loss[bx] = block_sum(lr_s)
                else:  # "warp": 32 lanes sum rows * 2 / 32 half rows each, then one thread the 32
                    if tx < 32:
                        ws_s[tx] = lane_sum(lr_s, tx)
                    T.sync_threads()
                    if tx == 0:
                        loss[bx] = warp_sum(ws_s)
            slot = slots[bx]
            if slot >= 0:
                T.copy(val_s, values[slot, 0:rows, 0:row_len // 2])
                T.copy(meta_s, meta[slot, 0:rows, 0:words])

    return compress


@functools.lru_cache(maxsize=None)
def get_kernel(operand: str, head_dim: int, dtype: str, loss_mode: str = "block", target=None):
    """Compiled compression kernel for one (operand, head_dim, dtype); cached per process.
    ``loss_mode``: "block" / "warp" write the block's loss ``[N]`` (summed by one thread / by a warp
    then one thread); "group" the per-group losses ``[N, R, G]``."""
    # no shared-memory reuse: the planner aliased the loss rows onto the nibble buffer that other
    # threads may still be reading (no barrier between the two loops); 43 KB per program is cheap
    return tilelang.compile(_kernel(operand, head_dim, dtype, loss_mode=loss_mode), target=target or "cuda",
                            pass_configs={"tl.disable_shared_memory_reuse": True})
