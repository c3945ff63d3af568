/* A stand-in for libmoed_cuda.so that cannot load: it needs libmoed_test_missing_dep.so,
 * which the test does not put anywhere the loader looks (plugin.sh broken). */
int moed_test_missing_dep(void);

int moed_test_fake_plugin(void);

int moed_test_fake_plugin(void)
{
    return moed_test_missing_dep();
}
