/* libFuzzer target: the profile record decoder behind its checksum. Each input is copied
 * and given the payload length and FNV-1a checksum that match its bytes before decoding,
 * so the mutations reach the section parser instead of stopping at "checksum mismatch".
 * Same properties as fuzz_prof_record.c; same seed corpus (corpus/prof_record). */
#define FUZZ_PATCH_CHECKSUM 1
#include "fuzz_prof_record.c"
