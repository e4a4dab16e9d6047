// The cuDNN entry points trainkit calls, as pointers filled by dlsym (cudnn_loader.cpp). Each pointer's type is the
// real header's declaration (decltype), so nothing is declared by hand and a signature change fails to compile.
// Only in builds that found cudnn.h (TK_HAVE_CUDNN); the library itself is never linked.
#pragma once
#ifdef TK_HAVE_CUDNN
#include <cudnn.h>

namespace tk::cuda {

// X(member, symbol): every entry point, once.
#define TK_CUDNN_ENTRY_POINTS(X)                                                   \
  X(get_version, cudnnGetVersion)                                                  \
  X(get_error_string, cudnnGetErrorString)                                         \
  X(create, cudnnCreate)                                                           \
  X(destroy, cudnnDestroy)                                                         \
  X(set_stream, cudnnSetStream)                                                    \
  X(create_tensor, cudnnCreateTensorDescriptor)                                    \
  X(set_tensor_4d_ex, cudnnSetTensor4dDescriptorEx)                                \
  X(destroy_tensor, cudnnDestroyTensorDescriptor)                                  \
  X(create_filter, cudnnCreateFilterDescriptor)                                    \
  X(set_filter_4d, cudnnSetFilter4dDescriptor)                                     \
  X(destroy_filter, cudnnDestroyFilterDescriptor)                                  \
  X(create_conv, cudnnCreateConvolutionDescriptor)                                 \
  X(set_conv_2d, cudnnSetConvolution2dDescriptor)                                  \
  X(set_conv_math_type, cudnnSetConvolutionMathType)                               \
  X(set_conv_group_count, cudnnSetConvolutionGroupCount)                           \
  X(destroy_conv, cudnnDestroyConvolutionDescriptor)                               \
  X(forward_output_dim, cudnnGetConvolution2dForwardOutputDim)                     \
  X(forward_max_count, cudnnGetConvolutionForwardAlgorithmMaxCount)                \
  X(forward_heuristics, cudnnGetConvolutionForwardAlgorithm_v7)                    \
  X(forward_workspace, cudnnGetConvolutionForwardWorkspaceSize)                    \
  X(forward, cudnnConvolutionForward)                                              \
  X(backward_data_max_count, cudnnGetConvolutionBackwardDataAlgorithmMaxCount)     \
  X(backward_data_heuristics, cudnnGetConvolutionBackwardDataAlgorithm_v7)         \
  X(backward_data_workspace, cudnnGetConvolutionBackwardDataWorkspaceSize)         \
  X(backward_data, cudnnConvolutionBackwardData)                                   \
  X(backward_filter_max_count, cudnnGetConvolutionBackwardFilterAlgorithmMaxCount) \
  X(backward_filter_heuristics, cudnnGetConvolutionBackwardFilterAlgorithm_v7)     \
  X(backward_filter_workspace, cudnnGetConvolutionBackwardFilterWorkspaceSize)     \
  X(backward_filter, cudnnConvolutionBackwardFilter)

struct CudnnApi {
#define TK_CUDNN_MEMBER(member, symbol) decltype(&::symbol) member = nullptr;
  TK_CUDNN_ENTRY_POINTS(TK_CUDNN_MEMBER)
#undef TK_CUDNN_MEMBER
};

}  // namespace tk::cuda
#endif
