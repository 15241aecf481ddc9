/* Multiply one element by a coefficient, in place: the scale step of
   gradient clipping, g = g * coef, with coef = min(max_norm / (norm + 1e-6), 1)
   computed on the device beforehand. */

__device__ __forceinline__ void HT_FN(ht_scale)(HT_REAL *value, HT_REAL coef)
{
    *value = *value * coef;
}
