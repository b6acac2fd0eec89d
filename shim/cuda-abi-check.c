/* SPDX-License-Identifier: MIT */
/*
 * Compiled only when the CUDA toolkit's headers are found: proves at build
 * time that the shim's own ABI copy (cuda-abi.h) matches them, constant by
 * constant and signature by signature.  Nothing here runs.
 */
#include "config.h"

#include <cuda.h>
#include <stddef.h>
#include <cuda_runtime_api.h>

#define KVT_CUDA_ABI_CHECK
#include "cuda-abi.h"

#define CHECK_CONST(name, value) _Static_assert((long)(name) == (long)(value), #name " differs from CUDA's");
KVT_CUDA_CONSTS(CHECK_CONST)
KVT_CUDA_ADVISE(CHECK_CONST)
KVT_CUDA_LOCATION_TYPES(CHECK_CONST)
KVT_CUDA_MEMCPY_KINDS(CHECK_CONST)
KVT_CUDA_DEVICE_ATTRS(CHECK_CONST)
KVT_CU_CONSTS(CHECK_CONST)
KVT_CU_LIMITS(CHECK_CONST)
KVT_CU_CAPTURE_STATUS(CHECK_CONST)

#define CHECK_FUNC(ret, name, args)                                                                \
        _Static_assert(__builtin_types_compatible_p(__typeof__(&name), ret(*) args),               \
                       #name " signature differs from CUDA's");
/* Every entry point of the lists but those C's headers do not declare under
 * their name (cuda-abi.h says why). */
#undef KVT_CUDART_STUB_HOOKS
#define KVT_CUDART_STUB_HOOKS(X)
#undef KVT_CUDA_LEGACY_HOOKS
#define KVT_CUDA_LEGACY_HOOKS(X)
/* cudaGetDriverEntryPoint is deprecated in CUDA 13, and still hooked. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
KVT_CUDART_FUNCS(CHECK_FUNC)
KVT_CUDART_TEST_FUNCS(CHECK_FUNC)
KVT_CUDA_FUNCS(CHECK_FUNC)
#pragma GCC diagnostic pop
_Static_assert(sizeof(dim3) == 12, "dim3 layout");
_Static_assert(sizeof(CUstreamCaptureStatus) == sizeof(int), "enum size");
_Static_assert(offsetof(cudaLaunchConfig_t, stream) == 32, "cudaLaunchConfig_t's stream");
_Static_assert(offsetof(CUlaunchConfig, hStream) == 32, "CUlaunchConfig's stream");

_Static_assert(sizeof(struct cudaMemLocation) == 8, "struct cudaMemLocation layout");
_Static_assert(sizeof(enum cudaMemoryAdvise) == sizeof(int), "enum size");

/* CUPTI: constants, record layouts, entry points. */
#include <cupti.h>
#define KVT_CUPTI_ABI_CHECK
#include "cupti-abi.h"
KVT_CUPTI_CONSTS(CHECK_CONST)
KVT_CUPTI_FUNCS(CHECK_FUNC)
_Static_assert(sizeof(CUpti_ActivityUnifiedMemoryCounter3) == 104, "UM counter record size");
_Static_assert(offsetof(CUpti_ActivityUnifiedMemoryCounter3, counterKind) == 4, "UM record counterKind");
_Static_assert(offsetof(CUpti_ActivityUnifiedMemoryCounter3, value) == 8, "UM record value");
_Static_assert(offsetof(CUpti_ActivityUnifiedMemoryCounter3, address) == 32, "UM record address");
_Static_assert(offsetof(CUpti_ActivityUnifiedMemoryCounter3, flags) == 56, "UM record flags");
_Static_assert(sizeof(CUpti_ActivityUnifiedMemoryCounterConfig) == 16, "UM counter config size");
_Static_assert(offsetof(CUpti_ActivityUnifiedMemoryCounterConfig, kind) == 4, "UM config kind");
_Static_assert(offsetof(CUpti_ActivityUnifiedMemoryCounterConfig, enable) == 12, "UM config enable");

/* ISO C wants a translation unit to declare something. */
extern int kvt_cuda_abi_checked;
