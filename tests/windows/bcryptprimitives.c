/* Test-only shim: Wine 8.0 has no bcryptprimitives.dll, whose ProcessPrng
 * Rust's standard library imports for random numbers. This DLL, placed
 * beside the .exe under test, answers ProcessPrng with advapi32's
 * SystemFunction036 (RtlGenRandom), which Wine has. Not part of the
 * product: a real Windows has the system DLL. */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T length)
{
    while (length > 0) {
        ULONG chunk = length > 0x10000000 ? 0x10000000 : (ULONG)length;
        if (!SystemFunction036(data, chunk))
            return FALSE;
        data += chunk;
        length -= chunk;
    }
    return TRUE;
}
