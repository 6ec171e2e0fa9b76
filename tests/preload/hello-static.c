/* hello-static - a statically linked program (see tests/test_decline.py). */
#include <stdio.h>

int main(void)
{
	puts("hello from a static program");
	return 7;
}
