/*
 * cunames-lib.c - libcunames.so: an unrelated library whose names start
 * with "cu" (cudnnCreate, curl_easy_init) and which even exports its own
 * cuInit. The preload must leave every one of them alone.
 */
int cudnnCreate(void **handle);
void *curl_easy_init(void);
int cuInit(unsigned int flags);

int cudnnCreate(void **handle)
{
	if (handle)
		*handle = 0;
	return 7;
}

void *curl_easy_init(void)
{
	return (void *)0;
}

int cuInit(unsigned int flags)
{
	(void)flags;
	return 42;
}
