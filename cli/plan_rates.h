/* cli/plan_rates.h — planner rates measured on this machine and the `--plan`
 * of `nearattn check-config` (cli/plan_rates.c; arithmetic in common/plan.h). */
#ifndef NA_CLI_PLAN_RATES_H
#define NA_CLI_PLAN_RATES_H

#include "common/config.h"
#include "common/plan.h"

/* Defaults for what is not measured (disk, link), labelled as assumed. */
void        na_cli_plan_defaults(na_plan_rates_t *r);
/* Measure gemv_Bps, gemm_flops and attn_Bps for model shape mc with the cpu
 * kernels on `threads` threads (about a second). NA_ERR_NOMEM. */
na_status_t na_cli_plan_measure(const na_model_config_t *mc, int threads, na_plan_rates_t *r);
/* check-config --plan: print the estimates and suggestions for cfg's model;
 * rates = NULL or "measured", else a rates file. Returns the exit code. */
int         na_cli_plan(const na_cfg_t *cfg, const char *rates);

#endif /* NA_CLI_PLAN_RATES_H */
