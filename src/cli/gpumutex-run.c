/*
 * gpumutex-run.c - the `gpumutex-run` program; everything is in run.c so
 * that the `gpumutex` CLI can offer the same as `gpumutex run`.
 */
#include "run.h"

int main(int argc, char **argv)
{
	return gm_run_main(argc, argv);
}
