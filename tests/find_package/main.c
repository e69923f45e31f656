/* Prints the library's version and the message of a refused call: the
 * header, the library and the per-thread error text, from an install. */
#include <stdio.h>

#include <tilejit/tilejit.h>

int main(void) {
  int64_t bytes = 0;
  tj_status s = tj_attn_bwd_workspace_size(NULL, 1, 1, 1, 1, 1, 64, &bytes);
  printf("tilejit %s; a null engine: %d (%s)\n", tj_version(), (int)s, tj_last_error());
  return s == TJ_INVALID_ARGUMENT ? 0 : 1;
}
