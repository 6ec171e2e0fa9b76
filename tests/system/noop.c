/* noop.c - a library that does nothing: another line of the
 * /etc/ld.so.preload that `gpumutex install --system` must keep. */
int gm_test_noop(void);
int gm_test_noop(void)
{
	return 0;
}
