/* One SGD step for one element, in place: weight decay, momentum,
   dampening, Nesterov, optional maximize.

   Scalars from the host (kernels.reference.SGDScalars): neg_lr = -lr,
   one_minus_dampening = 1 - dampening. With g the gradient (negated when
   maximizing):
     g   = g + weight_decay * param                  (only if weight_decay != 0)
     buf = first_step ? g
                      : buf * momentum + one_minus_dampening * g
                                                     (only if momentum != 0)
     g   = nesterov ? g + momentum * buf : buf       (only if momentum != 0)
     param = param + neg_lr * g
   momentum_buffer is only touched when momentum is nonzero (it may be 0). */

__device__ __forceinline__ void HT_FN(ht_sgd_step)(
    HT_REAL *param, HT_REAL grad, HT_REAL *momentum_buffer, HT_REAL neg_lr,
    HT_REAL weight_decay, HT_REAL momentum, HT_REAL one_minus_dampening, int nesterov,
    int first_step, int maximize)
{
    HT_REAL g = maximize ? -grad : grad;
    if (weight_decay != 0) {
        g = g + weight_decay * *param;
    }
    if (momentum != 0) {
        const HT_REAL buf =
            first_step ? g : *momentum_buffer * momentum + one_minus_dampening * g;
        *momentum_buffer = buf;
        g = nesterov ? g + momentum * buf : buf;
    }
    *param = *param + neg_lr * g;
}
