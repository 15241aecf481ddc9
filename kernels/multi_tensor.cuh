/* Locating an element of a launch that spans several tensors.

   The tensors of one launch lie in one flat index space cut into chunks of
   1 << chunk_shift indices. Each tensor starts at a chunk boundary: tensor t
   holds the flat indices starts[t] <= i < starts[t] + sizes[t], and the
   indices from its end to the next chunk boundary are padding that no element
   owns. chunks[c] is the tensor whose range holds chunk c (a chunk never
   spans two tensors), so an element finds its tensor with one load from a
   small table instead of a search, and the threads of a warp, whose indices
   share a chunk, read the same entry. kernels._multi_tensor builds the table
   once per set of tensors and picks chunk_shift there. A launch of the
   optimizers whose tensors all start 16-byte aligned counts its indices in
   vectors of HT_VEC elements (real.cuh) instead: starts and the chunks are in
   vectors, sizes stay in elements (kernels._specs._each_vector). */

#ifndef HT_MULTI_TENSOR_CUH
#define HT_MULTI_TENSOR_CUH

/* The tensor holding flat index i, and through k the element's index in it:
   k is sizes[t] or more where i is padding. */
__device__ __forceinline__ long long ht_chunk_tensor(const long long *chunks, int chunk_shift,
                                                     const long long *starts, long long i,
                                                     long long *k)
{
    const long long t = chunks[i >> chunk_shift];
    *k = i - starts[t];
    return t;
}

#endif
