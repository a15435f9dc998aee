/* Directories: paths, fsync, and removal of what tartan wrote. */
#ifndef TT_IO_DIR_H
#define TT_IO_DIR_H

#include "common/common.h"

/* Path helpers: malloc'd "dir/name". */
char *tt_path_join(const char *dir, const char *name);
int tt_fsync_dir(const char *dir);
/* Removes a directory and the regular files directly in it (index directories are flat). */
int tt_remove_dir(const char *dir);

#endif
