// test/cuda/cuda_fp16.h: IEEE binary16 for the CPU layer. Conversions round to
// nearest even (float -> half) and are exact (half -> float); test_half checks both
// against the compiler's _Float16 for every input. Arithmetic goes through float,
// which for one operation rounds the same as native half arithmetic (float has more
// than 2*11+2 significant bits).
#pragma once
#include <stdint.h>
#include <string.h>

namespace cudacpu {
static inline uint16_t float_to_half_bits(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
    if (a >= 0x7f800000u)  // inf stays inf; NaN stays NaN (quiet, top payload bits kept)
        return (uint16_t)(sign | (a > 0x7f800000u ? 0x7e00u | ((a >> 13) & 0x3ffu) : 0x7c00u));
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  // rounds to >= 65520: inf
    if (a < 0x38800000u) {  // below 2^-14: a subnormal half (or zero): units of 2^-24
        if (a < 0x33000000u) return (uint16_t)sign;  // <= 2^-25 rounds to zero (2^-25 exactly: tie to even 0)
        uint32_t m = (a & 0x7fffffu) | 0x800000u, e = a >> 23;  // value = m * 2^(e-150)
        int shift = 126 - (int)e;                              // result = m >> shift in units of 2^-24 (14..24)
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        r += rem > half || (rem == half && (r & 1));
        return (uint16_t)(sign | r);
    }
    // normal: rebias the exponent (127 -> 15), keep 10 mantissa bits, round to nearest even
    uint32_t r = (a - 0x38000000u) >> 13, rem = a & 0x1fffu;
    r += rem > 0x1000u || (rem == 0x1000u && (r & 1));
    return (uint16_t)(sign | r);  // a carry into the exponent is the right result (up to inf)
}
static inline float half_bits_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
    if (e == 0x1f) x = sign | 0x7f800000u | (m << 13);
    else if (e) x = sign | ((e + 112) << 23) | (m << 13);
    else if (!m) x = sign;
    else {  // subnormal: normalise
        int s = 0;
        while (!(m & 0x400u)) { m <<= 1; s++; }
        x = sign | ((uint32_t)(113 - s) << 23) | ((m & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &x, 4);
    return f;
}
}  // namespace cudacpu

struct __half {
    uint16_t bits;
    __half() = default;
    __half(float f) : bits(cudacpu::float_to_half_bits(f)) {}
    __half(double d) : bits(cudacpu::float_to_half_bits((float)d)) {}  // as CUDA: through float
    __half(int i) : bits(cudacpu::float_to_half_bits((float)i)) {}
    operator float() const { return cudacpu::half_bits_to_float(bits); }
};
typedef __half half;
static inline __half __float2half(float f) { return __half(f); }
static inline __half __float2half_rn(float f) { return __half(f); }
static inline float __half2float(__half h) { return (float)h; }
static inline __half operator+(__half a, __half b) { return __half((float)a + (float)b); }
static inline __half operator-(__half a, __half b) { return __half((float)a - (float)b); }
static inline __half operator*(__half a, __half b) { return __half((float)a * (float)b); }
static inline __half operator/(__half a, __half b) { return __half((float)a / (float)b); }
static inline __half operator-(__half a) { __half r = a; r.bits ^= 0x8000u; return r; }
static inline __half __habs(__half a) { __half r = a; r.bits &= 0x7fffu; return r; }
static inline bool __hisnan(__half a) { return (a.bits & 0x7fffu) > 0x7c00u; }
static inline bool __hisinf(__half a) { return (a.bits & 0x7fffu) == 0x7c00u; }
