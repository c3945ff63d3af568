/* The measurement schedule: which steps are recorded, which close a window. */
#include "moe_prof/prof.h"

int64_t moe_prof_schedule(const moe_config_t *cfg, int64_t step, bool *recorded, bool *closes)
{
    *recorded = false;
    *closes = false;
    int64_t r = step - cfg->prof_warmup_steps;
    if (r < 0) {
        return -1;
    }
    int64_t period = cfg->prof_measurement_steps + cfg->prof_wait_steps;
    int64_t w = r / period, pos = r % period;
    if ((cfg->prof_repeat > 0 && w >= cfg->prof_repeat) || pos >= cfg->prof_measurement_steps) {
        return -1;
    }
    *recorded = pos % cfg->prof_sampling_rate == 0;
    *closes = pos == cfg->prof_measurement_steps - 1;
    return w;
}

int64_t moe_prof_schedule_recorded(const moe_config_t *cfg, int64_t steps)
{
    int64_t n = 0;
    for (int64_t s = 0; s < steps; s++) {
        bool recorded = false, closes = false;
        (void)moe_prof_schedule(cfg, s, &recorded, &closes);
        n += recorded;
    }
    return n;
}
