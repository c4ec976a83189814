/* A host that loads and unloads a library again and again (a server swapping
 * models): each cycle opens a session, trains nothing, closes it and unloads
 * the library. Resident memory may not grow with the cycles (it grew 72 KB a
 * cycle while the library's own libstdc++ kept its exception pool).
 * Usage: reload MODEL.so CYCLES; exit status 1 when memory grew over 1 MB. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "sgc/sgc.h"

static long residentKb(void) {
  long pages = 0, resident = 0;
  FILE* f = fopen("/proc/self/statm", "r");
  if (!f || fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
  if (f) fclose(f);
  return resident * 4;
}

static int cycle(const char* path) {
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) return printf("cannot load %s: %s\n", path, dlerror()), 1;
  typedef sgc_status (*create_t)(const sgc_session_options*, sgc_session**);
  typedef void (*destroy_t)(sgc_session*);
  create_t create = (create_t)dlsym(lib, "sgc_session_create");
  destroy_t destroy = (destroy_t)dlsym(lib, "sgc_session_destroy");
  sgc_session_options o = SGC_SESSION_OPTIONS_INIT;
  o.num_threads = 2;
  sgc_session* s = NULL;
  if (!create || !destroy || create(&o, &s) != SGC_OK) return printf("cannot open a session\n"), 1;
  destroy(s);
  dlclose(lib);
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 3) return printf("usage: reload MODEL.so CYCLES\n"), 2;
  int cycles = atoi(argv[2]);
  for (int i = 0; i < 20; ++i) /* the allocator's first arenas */
    if (cycle(argv[1])) return 1;
  long first = residentKb();
  for (int i = 0; i < cycles; ++i)
    if (cycle(argv[1])) return 1;
  long grown = residentKb() - first;
  printf("reload: %d load/session/unload cycles, resident memory grew %ld KB\n", cycles, grown);
  return grown > 1024;
}
