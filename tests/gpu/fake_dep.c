/* The library the fake plug-in needs (plugin.sh broken): built, but never found at run
 * time. */
int moed_test_missing_dep(void);

int moed_test_missing_dep(void)
{
    return 0;
}
