/* Hard limits every part agrees on: the config checks against them and the decoders in
 * proto/ refuse anything beyond them before allocating. Part of the base layer. */
#ifndef MOE_LIMITS_H
#define MOE_LIMITS_H

#define MOE_MAX_EXPERTS 1024
#define MOE_MAX_RANKS 4096
#define MOE_PATH_MAX 1024
/* What a run folder's name (/DATE__TIME_HASH-N) and the longest of its files' names
 * (summary_rank_4095.txt.tmp.PID) add to profiler.output_dir: the folder must be shorter
 * than MOE_PATH_MAX - MOE_RUN_DIR_ROOM (checked before the run, not found after it). */
#define MOE_RUN_DIR_ROOM 128

#endif /* MOE_LIMITS_H */
