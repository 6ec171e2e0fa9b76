/* nexttwo.c - libnexttwo.so: the second definition of shared_fn. */
int shared_fn(void);

int shared_fn(void)
{
	return 2;
}
