/* y = scale * sigmoid(x) = scale / (1 + exp(-x)), and its gradient.

   Both use e = exp(-|x|), which lies in (0, 1] and so never overflows:
     y      = (x >= 0 ? scale : scale * e) / (1 + e)
     dy/dx  = scale * sigmoid(x) * sigmoid(-x) = scale * e / (1 + e)^2
   so one exponential per element serves the scale, the sigmoid and the
   gradient, and large |x| saturates to scale or 0 with a zero gradient
   instead of producing inf / inf. */

__device__ __forceinline__ HT_REAL HT_FN(ht_scaled_sigmoid)(HT_REAL x, HT_REAL scale)
{
    const HT_REAL e = HT_EXP(-HT_FABS(x));
    return (x >= 0 ? scale : scale * e) / (1 + e);
}

__device__ __forceinline__ HT_REAL HT_FN(ht_scaled_sigmoid_grad)(HT_REAL x, HT_REAL grad_out,
                                                                 HT_REAL scale)
{
    const HT_REAL e = HT_EXP(-HT_FABS(x));
    return ((grad_out * scale) * e) / ((1 + e) * (1 + e));
}
