/* nsa.c - libnsa.so: needs libnsdup.so, found by its RUNPATH ($ORIGIN/nsa). */
int nsdup_which(void);
int nsa_which(void);
int nsa_which(void)
{
	return nsdup_which();
}
