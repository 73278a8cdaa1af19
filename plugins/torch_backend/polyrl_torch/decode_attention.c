/* The sampler's shared-prompt attention for one new token per row on AVX-512 or AVX2 CPUs, float32: each row's
   query heads attend its prompt's keys and values (stored once per prompt, left padding hidden) and the
   row's own completion keys and values, in one softmax.

   Why: the same attention written as torch ops (polyrl_torch.shared_prompt_cache) is four small batched
   matmuls and a dozen elementwise ops a layer, each a dispatch costing more than its arithmetic at
   these sizes (a few rows, a head dimension of 64, tens to hundreds of keys). Here each row and key/value
   head reads its keys once for all the query heads of its group and keeps the sums in registers. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "native_exp.h"
#include "native_simd.h"

/* Lines of keys fetched ahead of the block being scored: two blocks, so they arrive while this one multiplies. */
#define AHEAD_BLOCKS 2

/* scores[a * stride + j] = scale * q_a . key_j for the `g` queries `q` ([g][d]) and `count` keys ([count][d]),
   LANES keys at a time; a key whose `hidden` byte is set (NULL: none is) scores -inf. The block's LANES dot
   products are summed side by side (one key's products in one chain would wait on each multiply-add), each in
   the order a lone dot product takes. */
static void score(const float *q, int g, int d, const float *keys, int count, const unsigned char *hidden,
                  float scale, float *scores, int stride) {
    const vf scales = vset(scale), none = vset(-INFINITY);
    const size_t block_bytes = (size_t)LANES * d * sizeof(float);
    for (int j0 = 0; j0 < count; j0 += LANES) {
        const int n = count - j0 < LANES ? count - j0 : LANES;
        const float *block_keys = keys + (size_t)j0 * d;
        if (j0 + (AHEAD_BLOCKS + 1) * LANES <= count) {
            const char *ahead = (const char *)(block_keys + (size_t)AHEAD_BLOCKS * LANES * d);
            for (size_t line = 0; line < block_bytes; line += 64) _mm_prefetch(ahead + line, _MM_HINT_T0);
        }
        const vmask block = vfirst(n);
        vmask shown = block;
        if (hidden)
            for (int jj = 0; jj < n; jj++)
                if (hidden[j0 + jj]) shown = vwithout(shown, jj);
        for (int a = 0; a < g; a++) {
            const float *qa = q + (size_t)a * d;
            vf products[LANES];
            for (int jj = 0; jj < LANES; jj++) products[jj] = vzero();
            if (n == LANES) /* a whole block: a fixed count the compiler unrolls */
                for (int c = 0; c < d; c += LANES) {
                    const vf qc = vload(qa + c);
                    for (int jj = 0; jj < LANES; jj++)
                        products[jj] = vfmadd(qc, vload(block_keys + (size_t)jj * d + c), products[jj]);
                }
            else
                for (int c = 0; c < d; c += LANES) {
                    const vf qc = vload(qa + c);
                    for (int jj = 0; jj < n; jj++)
                        products[jj] = vfmadd(qc, vload(block_keys + (size_t)jj * d + c), products[jj]);
                }
            vstore_on(scores + (size_t)a * stride + j0, block, vpick(shown, none, vmul(vsums(products), scales)));
        }
    }
}

/* acc[0..CH) += sum_j w[j] * values[j][0..CH vectors): the CH sums stay in registers across the values (sums
   kept in memory would chain every multiply-add through a store and a load). */
static inline __attribute__((always_inline)) void gather_vectors(const int CH, const float *w, const float *values,
                                                                 int count, int d, vf *acc) {
    vf sums[8];
    for (int c = 0; c < CH; c++) sums[c] = acc[c];
    for (int j = 0; j < count; j++) {
        const vf weight = vset(w[j]);
        const float *value = values + (size_t)j * d;
        for (int c = 0; c < CH; c++) sums[c] = vfmadd(weight, vload(value + LANES * c), sums[c]);
    }
    for (int c = 0; c < CH; c++) acc[c] = sums[c];
}

/* out += sum_j w[j] * values[j] over `count` values ([count][d]), d / LANES vectors of sums, eight (then four,
   then one) at a time; each sum adds the values in order, as one pass over all d would. */
static void gather(const float *w, const float *values, int count, int d, vf *acc) {
    const int vectors = d / LANES;
    int c = 0;
    for (; c + 8 <= vectors; c += 8) gather_vectors(8, w, values + LANES * c, count, d, acc + c);
    for (; c + 4 <= vectors; c += 4) gather_vectors(4, w, values + LANES * c, count, d, acc + c);
    for (; c < vectors; c++) gather_vectors(1, w, values + LANES * c, count, d, acc + c);
}

/* q [rows][kv_heads][g][d]; prompt_keys/values [prompts][kv_heads][prompt_len][d]; hidden [prompts][prompt_len]
   (1: a padding position); owner [rows] (each row's prompt); keys/values [rows][kv_heads][capacity][d], the
   first `length` positions written; scratch: g * (prompt_len + length) floats; out like q. d: a multiple of
   16, at most 256 (the caller checks). */
void polyrl_shared_attention(const float *q, const float *prompt_keys, const float *prompt_values,
                             const unsigned char *hidden, const int64_t *owner, const float *keys,
                             const float *values, int rows, int kv_heads, int g, int d, int prompt_len,
                             int capacity, int length, float scale, float *scratch, float *out) {
    const int total = prompt_len + length;
    for (int r = 0; r < rows; r++) {
        const int64_t p = owner[r];
        for (int h = 0; h < kv_heads; h++) {
            const size_t shared = ((size_t)p * kv_heads + h) * prompt_len * d;
            const size_t own = ((size_t)r * kv_heads + h) * capacity * d;
            const float *qs = q + ((size_t)r * kv_heads + h) * g * d;
            score(qs, g, d, prompt_keys + shared, prompt_len, hidden + (size_t)p * prompt_len, scale, scratch, total);
            score(qs, g, d, keys + own, length, NULL, scale, scratch + prompt_len, total);
            for (int a = 0; a < g; a++) {
                float *s = scratch + (size_t)a * total;
                vf top = vset(-INFINITY);
                int j = 0;
                for (; j + LANES <= total; j += LANES) top = vmax(top, vload(s + j));
                float peak = vtop(top);
                for (; j < total; j++) peak = s[j] > peak ? s[j] : peak;
                const vf peaks = vset(peak), none = vset(-INFINITY);
                vf sums = vzero();
                for (j = 0; j < total; j += LANES) {
                    const vf v = vload_upto(s + j, total - j);
                    /* lanes past `total` (read as 0) and hidden keys (-inf) weigh 0 */
                    const vf w = vkeep(vdiffer(vfirst(total - j), v, none), exp_ps(vsub(v, peaks)));
                    vstore_upto(s + j, total - j, w);
                    sums = vadd(sums, w);
                }
                vf acc[256 / LANES];
                for (int c = 0; c < d / LANES; c++) acc[c] = vzero();
                gather(s, prompt_values + shared, prompt_len, d, acc);
                gather(s + prompt_len, values + own, length, d, acc);
                const vf sum = vset(vsum(sums));
                float *o = out + (((size_t)r * kv_heads + h) * g + a) * d;
                for (int c = 0; c < d / LANES; c++) vstore(o + LANES * c, vdiv(acc[c], sum));
            }
        }
    }
}
