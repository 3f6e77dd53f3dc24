/* true_static: /bin/true without the dynamic loader (static where the
 * toolchain allows): the floor of a rank's fork/exec (`rank_fork_exec`). */
int main(void) { return 0; }
