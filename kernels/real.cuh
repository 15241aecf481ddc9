/* The floating type the kernel math is written in, chosen per build.

   Every kernel's math is written once against HT_REAL, its functions named
   through HT_FN(name), which appends _f (float) or _d (double). A build
   defines HT_DOUBLE as 0 or 1, then includes this file and the math files;
   one translation unit may do so once per type, so nothing here is guarded.

   Only C99 and CUDA C++ are used, so the same files build with gcc for the
   host (with __device__ and __forceinline__ defined away) and with NVRTC or
   nvcc for a GPU. */

#undef HT_REAL
#undef HT_FN
#undef HT_SQRT
#undef HT_EXP
#undef HT_FABS

#if HT_DOUBLE
#define HT_REAL double
#define HT_FN(name) name##_d
#define HT_SQRT sqrt
#define HT_EXP exp
#define HT_FABS fabs
#else
#define HT_REAL float
#define HT_FN(name) name##_f
#define HT_SQRT sqrtf
#define HT_EXP expf
#define HT_FABS fabsf
#endif

/* HT_VEC numbers of HT_REAL fill 16 bytes, which one 128-bit load or store moves:
   the multi-tensor optimizers read and write their tensors in such vectors where
   every tensor of a launch starts 16-byte aligned (kernels._multi_tensor). */
#undef HT_VEC
#if HT_DOUBLE
#define HT_VEC 2
#else
#define HT_VEC 4
#endif

struct __attribute__((aligned(16))) HT_FN(ht_vec) {
    HT_REAL v[HT_VEC];
};
