// SPDX-License-Identifier: GPL-2.0 OR BSD-3-Clause
/*
 * A stand-in for the CUDA driver library (built as libcuda.so.1 by tests/test_kernel_cuda.py):
 * it exports the driver calls that iotrace probes, with the driver's argument order, and each
 * call waits for as long as its caller asked with fakeCudaSetWait (per thread: sleeping, as a
 * blocking synchronisation does, or spinning, as a spinning one does). No GPU is touched.
 */
#define _GNU_SOURCE
#include <stddef.h>
#include <time.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef void *CUstream;

static __thread long wait_ns;
static __thread int spin;

void fakeCudaSetWait(long ns, int spinning)
{
	wait_ns = ns;
	spin = spinning;
}

static long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

static CUresult wait_as_told(void)
{
	long end;
	struct timespec ts;

	if (wait_ns <= 0)
		return 0;
	if (!spin) {
		ts.tv_sec = wait_ns / 1000000000L;
		ts.tv_nsec = wait_ns % 1000000000L;
		while (clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts))
			;
		return 0;
	}
	end = now_ns() + wait_ns;
	while (now_ns() < end)
		;
	return 0;
}

CUresult cuStreamSynchronize(CUstream hStream) { (void)hStream; return wait_as_told(); }
CUresult cuCtxSynchronize(void) { return wait_as_told(); }
CUresult cuEventSynchronize(void *hEvent) { (void)hEvent; return wait_as_told(); }

CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
	(void)dstHost; (void)srcDevice; (void)ByteCount;
	return wait_as_told();
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
	(void)dstDevice; (void)srcHost; (void)ByteCount;
	return wait_as_told();
}

CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
	(void)dstDevice; (void)srcDevice; (void)ByteCount;
	return wait_as_told();
}

CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
			      CUstream hStream)
{
	(void)dstHost; (void)srcDevice; (void)ByteCount; (void)hStream;
	return wait_as_told();
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
			      CUstream hStream)
{
	(void)dstDevice; (void)srcHost; (void)ByteCount; (void)hStream;
	return wait_as_told();
}

CUresult cuLaunchKernel(void *f, unsigned int gridDimX, unsigned int gridDimY,
			unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
			unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
			void **kernelParams, void **extra)
{
	(void)f; (void)gridDimX; (void)gridDimY; (void)gridDimZ; (void)blockDimX;
	(void)blockDimY; (void)blockDimZ; (void)sharedMemBytes; (void)hStream;
	(void)kernelParams; (void)extra;
	return wait_as_told();
}
