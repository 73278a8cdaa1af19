/* The sampler's float32 matmul for AVX-512 or AVX2 CPUs: y[rows][n] = x[rows][k] * w[n][k]^T (+ nothing: bias is
   added by the caller), w packed by decode_kernel.py in panels of PANEL output columns (three vectors: 48 with
   AVX-512, 24 with AVX2), [ceil(n/PANEL)][k][PANEL], the last panel padded with zeros.

   Why: a decode step multiplies a few rows by every weight once, so its time is the weights' streaming
   from memory plus the arithmetic. oneDNN's packed matmul does the two in turns on the Xeons here; this
   kernel keeps up to TILE_ROWS rows x PANEL columns of sums in registers (8 x 48 in 24 of AVX-512's 32
   registers, 4 x 24 in 12 of AVX2's 16) and, while it multiplies one panel, prefetches the next one into L2,
   so the next weights arrive during the arithmetic. AVX2 builds, where all rows fit one tile, fetch
   STREAM_AHEAD bytes ahead of the weights being read instead, into L1: on the AVX2-only EPYC a panel ahead
   into L2 left a lone tile's loads waiting (11.8 GB/s against 13.6 for a plain read of the weights, 4 rows),
   while with several tiles the next panel's fetch overlaps the later tiles' arithmetic, which reads the
   panel from cache (fetching 1 KB ahead there: 10.0 GB/s against 11.5 at 8 rows). The rows are split into
   tiles of at most TILE_ROWS, as even as they go (12 rows on AVX-512: two of 6, not 8 and 4), and a tile of
   R rows is compiled for that R: few rows (long completions, small groups) then read each panel once, at
   about the rate this core streams memory. */
#include <stddef.h>

#include "native_simd.h"

#define PANEL (3 * LANES)
#define TILE_ROWS (LANES / 2)
#if LANES == 8
#define STREAM_AHEAD 1024
#endif

/* The panel width this build packs for (decode_kernel.py asks it). */
int polyrl_decode_panel(void) { return PANEL; }

/* One tile: R rows of x times one panel, into R rows x `cols` columns of y. Each k step also prefetches
   `step` lines of the next panel (`*line` counts them across the panel's tiles), or, for a `lone` tile of an
   AVX2 build, the lines STREAM_AHEAD bytes ahead. */
static inline __attribute__((always_inline)) void tile(const int R, const float *x, int k, const float *w,
                                                       float *y, int n, int cols, const char *next,
                                                       size_t *line, size_t lines, int step, int lone) {
#ifndef STREAM_AHEAD
    (void)lone;
#endif
    vf acc[TILE_ROWS][3];
    for (int r = 0; r < R; r++)
        for (int j = 0; j < 3; j++) acc[r][j] = vzero();
    for (int i = 0; i < k; i++) {
        const float *wi = w + (size_t)i * PANEL;
#ifdef STREAM_AHEAD
        if (lone) {
            for (int b = 0; b < PANEL * (int)sizeof(float); b += 64)
                _mm_prefetch((const char *)wi + STREAM_AHEAD + b, _MM_HINT_T0);
        } else
#endif
            for (int s = 0; s < step && *line < lines; s++, (*line)++) _mm_prefetch(next + *line * 64, _MM_HINT_T1);
        const vf b0 = vload(wi), b1 = vload(wi + LANES), b2 = vload(wi + 2 * LANES);
        for (int r = 0; r < R; r++) {
            const vf s = vset(x[(size_t)r * k + i]);
            acc[r][0] = vfmadd(s, b0, acc[r][0]);
            acc[r][1] = vfmadd(s, b1, acc[r][1]);
            acc[r][2] = vfmadd(s, b2, acc[r][2]);
        }
    }
    for (int j = 0; j < 3; j++) {
        const int valid = cols - LANES * j;
        if (valid <= 0) break;
        for (int r = 0; r < R; r++) vstore_upto(y + (size_t)r * n + LANES * j, valid, acc[r][j]);
    }
}

#define TILE(R) case R: tile(R, xr, k, w, yr, n, cols, next, &line, line_count, step, tiles == 1); break;

void polyrl_decode_linear(const float *x, const float *panels, float *y, int rows, int n, int k) {
    if (rows <= 0 || n <= 0) return;
    if (k <= 0) { /* an empty sum */
        for (size_t i = 0; i < (size_t)rows * n; i++) y[i] = 0.0f;
        return;
    }
    const int count = (n + PANEL - 1) / PANEL;
    const int tiles = (rows + TILE_ROWS - 1) / TILE_ROWS;
    const size_t lines = ((size_t)k * PANEL * sizeof(float) + 63) / 64; /* cache lines of one panel */
    /* lines prefetched per k step of each tile: the next panel is in L2 before this one's last tile ends */
    const int step = (int)((lines + (size_t)k * tiles - 1) / ((size_t)k * tiles));
    for (int p = 0; p < count; p++) {
        const float *w = panels + (size_t)p * k * PANEL;
        const char *next = (const char *)(w + (size_t)k * PANEL);
        const size_t line_count = p + 1 < count ? lines : 0; /* nothing after the last panel */
        const int cols = n - p * PANEL < PANEL ? n - p * PANEL : PANEL;
        size_t line = 0;
        for (int t = 0, r = 0; t < tiles; t++) {
            const int height = rows / tiles + (t < rows % tiles);
            const float *xr = x + (size_t)r * k;
            float *yr = y + (size_t)r * n + (size_t)p * PANEL;
            switch (height) {
                TILE(1) TILE(2) TILE(3) TILE(4)
#if TILE_ROWS > 4
                TILE(5) TILE(6) TILE(7) TILE(8)
#endif
            }
            r += height;
        }
    }
}
