/* libFuzzer harness for the length-file parser: any bytes in, a status out, never a crash,
   a leak or undefined behaviour; accepted input only ever yields lengths in range.
   Built and run by `make fuzz` (clang -fsanitize=fuzzer,address,undefined). */
#define DCP_IMPLEMENTATION
#include "../dcp.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int64_t *lengths = NULL;
    int32_t count = 0, i;
    dcp_error error;
    if (dcp_lengths_parse((const char *)data, size, NULL, &lengths, &count, &error) == DCP_OK) {
        if (count < 1) abort();
        for (i = 0; i < count; i++)
            if (lengths[i] < 1 || lengths[i] > DCP_MAX_SAMPLE_LENGTH) abort();
    } else if (lengths != NULL || count != 0 || error.message[0] == '\0') {
        abort();
    }
    dcp_free(NULL, lengths);
    return 0;
}
