/* A decode-shape matmul with software prefetch, for bench/decode_kernel_probe.py only (the sampler runs
   plugins/torch_backend/polyrl_torch/decode_kernel.c).

   y[32][n] = x[32][k] * w[n][k]^T with w packed in 16-column panels ([n/16][k][16]) and x transposed
   ([k][32]). While one panel is multiplied, the panel `dist` panels ahead is prefetched into L2 one
   cache line per k step, so streaming the weights overlaps the arithmetic (dist 0: no prefetch).
   Why it exists: to measure how much of a one-thread decode step's time is the weights' streaming
   taking turns with the arithmetic rather than an arithmetic limit. */
#include <immintrin.h>
#include <stddef.h>

#define ROWS 32
#define TILE 16

void decode_gemm32(const float *xT, const float *wp, float *y, int n, int k, int dist) {
    const int panels = n / TILE;
    const char *end = (const char *)(wp + (size_t)panels * k * TILE);
    for (int p = 0; p < panels; p++) {
        const float *w = wp + (size_t)p * k * TILE;
        const char *ahead = (const char *)(wp + (size_t)(p + dist) * k * TILE);
        for (int g = 0; g < ROWS / TILE; g++) {
            __m512 acc[TILE];
            for (int r = 0; r < TILE; r++) acc[r] = _mm512_setzero_ps();
            const float *x = xT + g * TILE;
            for (int i = 0; i < k; i++) {
                if (dist > 0 && g == 0 && ahead + (size_t)i * 64 < end) _mm_prefetch(ahead + (size_t)i * 64, _MM_HINT_T1);
                const __m512 b = _mm512_load_ps(w + (size_t)i * TILE);
                const float *xr = x + (size_t)i * ROWS;
                for (int r = 0; r < TILE; r++) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(xr[r]), b, acc[r]);
            }
            float *out = y + (size_t)(g * TILE) * n + (size_t)p * TILE;
            for (int r = 0; r < TILE; r++) _mm512_storeu_ps(out + (size_t)r * n, acc[r]);
        }
    }
}
