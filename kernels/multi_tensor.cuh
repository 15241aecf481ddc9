/* Locating an element of a launch that spans several tensors.

   The tensors of one launch lie end to end in one flat index space: tensor t
   holds the flat indices offsets[t] <= i < offsets[t + 1] (offsets has
   n_tensors + 1 entries, offsets[0] == 0). An element finds its tensor by
   binary search over that small table, which stays in cache, so a single
   launch covers every tensor of one dtype and device without first copying
   them into one buffer. Empty tensors are harmless: the search returns the
   last tensor whose range starts at or before i. */

#ifndef HT_MULTI_TENSOR_CUH
#define HT_MULTI_TENSOR_CUH

__device__ __forceinline__ long long ht_tensor_of(const long long *offsets,
                                                  long long n_tensors, long long i)
{
    long long lo = 0;
    long long hi = n_tensors - 1;
    while (lo < hi) {
        const long long mid = (lo + hi + 1) / 2;
        if (offsets[mid] <= i) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    return lo;
}

#endif
