/*
 * fakenvml.c - the three NVML calls `gpumutex doctor` makes, for the
 * machine-wide tests (tests/system/scenarios.py): as many GPUs as the
 * fake driver has (FAKECUDA_NUM_DEVICES, default 8).
 */
#include <stdlib.h>

int nvmlInit_v2(void);
int nvmlShutdown(void);
int nvmlDeviceGetCount_v2(unsigned *count);

int nvmlInit_v2(void)
{
	return 0;
}

int nvmlShutdown(void)
{
	return 0;
}

int nvmlDeviceGetCount_v2(unsigned *count)
{
	const char *v = getenv("FAKECUDA_NUM_DEVICES");
	unsigned n = 0;

	if (!v || !*v)
		n = 8;
	for (; v && *v >= '0' && *v <= '9'; v++)
		n = n * 10 + (unsigned)(*v - '0');
	*count = n;
	return 0;
}
