/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * The few CUPTI definitions the heat sampler uses (CUPTI 13's
 * cupti_activity.h and cupti_result.h), so that the shim builds without
 * them and loads libcupti with dlopen at run time.  shim/cuda-abi-check.c
 * proves they match whenever the real headers are found.  The fake
 * libcupti.so.13 in tests/fakes implements the same ABI.
 */

#include <stddef.h>
#include <stdint.h>

#define KVT_CUPTI_CONSTS(X)                                                                        \
        X(CUPTI_SUCCESS, 0)                                                                        \
        X(CUPTI_ERROR_INVALID_PARAMETER, 1)                                                        \
        X(CUPTI_ERROR_MAX_LIMIT_REACHED, 12)                                                       \
        X(CUPTI_ERROR_NOT_INITIALIZED, 15)                                                         \
        X(CUPTI_ERROR_INVALID_KIND, 21)                                                            \
        X(CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER, 25)                                          \
        X(CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_SCOPE_PROCESS_SINGLE_DEVICE, 1)                   \
        X(CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD, 1)                      \
        X(CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOH, 2)                      \
        X(CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_CPU_PAGE_FAULT_COUNT, 3)                     \
        X(CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT, 4)                           \
        X(CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THRASHING, 5)                                \
        X(CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THROTTLING, 6)                               \
        X(CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_REMOTE_MAP, 7)                               \
        X(CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOD, 8)

/* Counter kinds 0 .. KVT_CUPTI_UM_KINDS-1 are counted per kind. */
#define KVT_CUPTI_UM_KINDS 9

#ifndef KVT_CUPTI_ABI_CHECK
#define KVT_CUPTI_ENUM(name, value) name = (value),
enum { KVT_CUPTI_CONSTS(KVT_CUPTI_ENUM) };
#undef KVT_CUPTI_ENUM

typedef int CUptiResult;
typedef int CUpti_ActivityKind;
typedef struct CUctx_st *CUcontext;

/* Every record starts with its kind; CUPTI packs records at 8 bytes. */
typedef struct __attribute__((packed, aligned(8))) {
        CUpti_ActivityKind kind;
} CUpti_Activity;

typedef struct __attribute__((packed, aligned(8))) {
        int scope; /* CUpti_ActivityUnifiedMemoryCounterScope */
        int kind;  /* CUpti_ActivityUnifiedMemoryCounterKind */
        uint32_t deviceId;
        uint32_t enable;
} CUpti_ActivityUnifiedMemoryCounterConfig;

/* The record of CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER. */
typedef struct __attribute__((packed, aligned(8))) {
        CUpti_ActivityKind kind;
        int counterKind;
        uint64_t value;   /* bytes for transfers, a count for faults */
        uint64_t start;   /* ns */
        uint64_t end;
        uint64_t address; /* virtual address of the page or range */
        uint32_t srcId;
        uint32_t dstId;
        uint32_t streamId;
        uint32_t processId;
        uint32_t flags;
        uint32_t pad;
        uint64_t processors[5];
} CUpti_ActivityUnifiedMemoryCounter3;

typedef void (*CUpti_BuffersCallbackRequestFunc)(uint8_t **buffer, size_t *size, size_t *maxNumRecords);
typedef void (*CUpti_BuffersCallbackCompleteFunc)(CUcontext context, uint32_t streamId, uint8_t *buffer,
                                                  size_t size, size_t validSize);
#endif

#define KVT_CUPTI_FUNCS(X)                                                                         \
        X(CUptiResult, cuptiActivityRegisterCallbacks,                                             \
          (CUpti_BuffersCallbackRequestFunc funcBufferRequested,                                   \
           CUpti_BuffersCallbackCompleteFunc funcBufferCompleted))                                 \
        X(CUptiResult, cuptiActivityConfigureUnifiedMemoryCounter,                                 \
          (CUpti_ActivityUnifiedMemoryCounterConfig * config, uint32_t count))                     \
        X(CUptiResult, cuptiActivityEnable, (CUpti_ActivityKind kind))                             \
        X(CUptiResult, cuptiActivityDisable, (CUpti_ActivityKind kind))                            \
        X(CUptiResult, cuptiActivityFlushAll, (uint32_t flag))                                     \
        X(CUptiResult, cuptiActivityGetNextRecord,                                                 \
          (uint8_t * buffer, size_t validBufferSizeBytes, CUpti_Activity * *record))               \
        X(CUptiResult, cuptiActivityGetNumDroppedRecords,                                          \
          (CUcontext context, uint32_t streamId, size_t * dropped))                                \
        X(CUptiResult, cuptiGetResultString, (CUptiResult result, const char **str))
