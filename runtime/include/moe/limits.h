/* Hard limits every part agrees on: the config checks against them and the decoders in
 * proto/ refuse anything beyond them before allocating. Part of the base layer. */
#ifndef MOE_LIMITS_H
#define MOE_LIMITS_H

#define MOE_MAX_EXPERTS 1024
#define MOE_MAX_RANKS 4096
#define MOE_PATH_MAX 1024

#endif /* MOE_LIMITS_H */
