// test/cuda/test_half.cpp: the CPU layer's half (cuda_fp16.h) against the compiler's
// _Float16, whose conversions are IEEE round-to-nearest-even: every one of the 2^32
// float bit patterns converted to half, and every one of the 2^16 halves back to
// float, must give the same bits (any NaN for a NaN). About 10 s on one core.
#include "cuda_fp16.h"
#include "test/test.h"
#include <math.h>

static uint16_t ref_bits(float f) {
    _Float16 h = (_Float16)f;
    uint16_t b;
    memcpy(&b, &h, 2);
    return b;
}

int main(void) {
    long bad = 0;
    uint32_t first = 0;
    #pragma omp parallel for schedule(static) reduction(+ : bad)
    for (long hi = 0; hi < 65536; hi++) {
        for (uint32_t lo = 0; lo < 65536; lo++) {
            uint32_t x = (uint32_t)hi << 16 | lo;
            float f;
            memcpy(&f, &x, 4);
            uint16_t got = cudacpu::float_to_half_bits(f), want = ref_bits(f);
            bool nan = (want & 0x7fff) > 0x7c00;
            if (nan ? (got & 0x7fff) <= 0x7c00 : got != want) {
                if (!bad) {
                    #pragma omp critical
                    first = x;
                }
                bad++;
            }
        }
    }
    CHECK(bad == 0, "float -> half: all 2^32 bit patterns round to nearest even as _Float16 does (%ld differ, e.g. 0x%08x)", bad, first);
    long bad2 = 0;
    for (uint32_t b = 0; b < 65536; b++) {
        _Float16 h;
        uint16_t hb = (uint16_t)b;
        memcpy(&h, &hb, 2);
        float want = (float)h, got = cudacpu::half_bits_to_float(hb);
        bad2 += isnan(want) ? !isnan(got) : memcmp(&want, &got, 4) != 0;
    }
    CHECK(bad2 == 0, "half -> float: all 2^16 halves convert exactly (%ld differ)", bad2);
    // the class goes through the same functions, both ways
    __half h = 65519.f, g = 65520.f, s = 5.9604645e-8f, t = 2.9802322e-8f;
    CHECK((float)h == 65504.f && isinf((float)g) && (float)s == 5.9604645e-8f && (float)t == 0.f,
          "__half: 65519 -> 65504, 65520 -> inf, 2^-24 kept, 2^-25 ties to 0");
    return test_summary("test_half");
}
