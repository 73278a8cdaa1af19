/* e^x for float32 vector lanes (native_simd.h's vf), shared by the sampler's C files (neither AVX-512 nor AVX2
   has an exp instruction). */
#ifndef POLYRL_NATIVE_EXP_H
#define POLYRL_NATIVE_EXP_H
#include "native_simd.h"

/* e^x for float32 lanes (range reduction by ln 2 in two parts, a degree-6 polynomial, times 2^n): within 2 ulp
   of the exact value; x at or below -87.3 (a softmax weight under 1e-38) gives a tiny or 0. */
static inline vf exp_ps(vf x) {
    x = vmax(vmin(x, vset(88.3f)), vset(-87.3f));
    const vf n = vround(vmul(x, vset(1.44269504088896341f)));
    vf r = vfnmadd(n, vset(0.693359375f), x);
    r = vfnmadd(n, vset(-2.12194440e-4f), r);
    vf p = vset(1.9875691500e-4f);
    p = vfmadd(p, r, vset(1.3981999507e-3f));
    p = vfmadd(p, r, vset(8.3334519073e-3f));
    p = vfmadd(p, r, vset(4.1665795894e-2f));
    p = vfmadd(p, r, vset(1.6666665459e-1f));
    p = vfmadd(p, r, vset(5.0000001201e-1f));
    p = vfmadd(p, vmul(r, r), vadd(r, vset(1.0f)));
    return vscale2(p, n);
}

#endif
