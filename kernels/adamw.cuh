/* One AdamW step for one element, in place: decoupled weight decay, bias
   correction, optional amsgrad, optional maximize.

   The per-step scalars come from the host (kernels.reference.AdamWScalars):
     decay                 = 1 - lr * weight_decay
     one_minus_beta1       = 1 - beta1
     one_minus_beta2       = 1 - beta2
     neg_step_size         = -lr / (1 - beta1^step)
     bias_correction2_sqrt = sqrt(1 - beta2^step)
   With g the gradient (negated when maximizing), the element becomes
     exp_avg     = exp_avg + one_minus_beta1 * (g - exp_avg)
     exp_avg_sq  = exp_avg_sq * beta2 + (one_minus_beta2 * g) * g
     v           = amsgrad ? (max_exp_avg_sq = max(max_exp_avg_sq, exp_avg_sq))
                           : exp_avg_sq
     param       = param * decay
                   + (neg_step_size * exp_avg) / (sqrt(v) / bias_correction2_sqrt + eps)
   in exactly this order of operations, which the torch reference repeats.
   max_exp_avg_sq is only touched when amsgrad is nonzero (it may be 0). */

/* max() that propagates NaN from either side, as torch.maximum does. */
__device__ __forceinline__ HT_REAL HT_FN(ht_nan_max)(HT_REAL a, HT_REAL b)
{
    return (a != a || a > b) ? a : b;
}

__device__ __forceinline__ void HT_FN(ht_adamw_step)(
    HT_REAL *param, HT_REAL grad, HT_REAL *exp_avg, HT_REAL *exp_avg_sq,
    HT_REAL *max_exp_avg_sq, HT_REAL decay, HT_REAL one_minus_beta1, HT_REAL beta2,
    HT_REAL one_minus_beta2, HT_REAL neg_step_size, HT_REAL bias_correction2_sqrt,
    HT_REAL eps, int amsgrad, int maximize)
{
    const HT_REAL g = maximize ? -grad : grad;
    const HT_REAL m = *exp_avg + one_minus_beta1 * (g - *exp_avg);
    const HT_REAL v = *exp_avg_sq * beta2 + (one_minus_beta2 * g) * g;
    HT_REAL v_used = v;
    if (amsgrad) {
        v_used = HT_FN(ht_nan_max)(*max_exp_avg_sq, v);
        *max_exp_avg_sq = v_used;
    }
    const HT_REAL denom = HT_SQRT(v_used) / bias_correction2_sqrt + eps;
    *param = *param * decay + (neg_step_size * m) / denom;
    *exp_avg = m;
    *exp_avg_sq = v;
}
