/* nsdup.c - libnsdup.so, built twice (nsa/ and nsb/) with WHICH 1 and 2:
 * one name in two directories, for nsedge.c. */
int nsdup_which(void);
int nsdup_which(void)
{
	return WHICH;
}
