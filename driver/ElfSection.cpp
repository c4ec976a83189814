// The ELF section reader (see ElfSection.h).
#include "driver/ElfSection.h"

#include <cstring>
#include <elf.h>
#include <fstream>
#include <string_view>
#include <sys/stat.h>
#include <vector>

namespace sgc::driver {
namespace {

class File {
public:
  File(const std::string& path, uint64_t size) : path_(path), size_(size), f_(path, std::ios::binary) {}

  /// `n` bytes at `offset`, when the file has them.
  Expected<std::string> read(uint64_t offset, uint64_t n, const char* what) {
    if (offset > size_ || n > size_ - offset)
      return makeError(path_ + ": not a complete ELF file (its " + std::string(what) + " lie beyond its " + std::to_string(size_) + " bytes)");
    std::string bytes(n, '\0');
    f_.seekg((std::streamoff)offset);
    if (!f_.read(bytes.data(), (std::streamsize)n)) return makeError(path_ + ": read error");
    return bytes;
  }

private:
  std::string path_;
  uint64_t size_;
  std::ifstream f_;
};

} // namespace

Expected<std::string> readElfSection(const std::string& path, const std::string& name) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return makeError(path + ": cannot open");
  if (!S_ISREG(st.st_mode)) return makeError(path + ": not a regular file");
  File f(path, (uint64_t)st.st_size);
  auto head = f.read(0, sizeof(Elf64_Ehdr), "ELF header");
  if (!head) return head.takeError();
  Elf64_Ehdr eh;
  std::memcpy(&eh, head->data(), sizeof eh);
  if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB)
    return makeError(path + ": not a 64-bit little-endian ELF file (a library compiled by sgc)");
  if (eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shstrndx >= eh.e_shnum)
    return makeError(path + ": its ELF section table is malformed");
  auto table = f.read(eh.e_shoff, (uint64_t)eh.e_shnum * sizeof(Elf64_Shdr), "section headers");
  if (!table) return table.takeError();
  std::vector<Elf64_Shdr> sections(eh.e_shnum);
  std::memcpy(sections.data(), table->data(), table->size());
  const Elf64_Shdr& strtab = sections[eh.e_shstrndx];
  auto names = f.read(strtab.sh_offset, strtab.sh_size, "section names");
  if (!names) return names.takeError();
  for (const Elf64_Shdr& s : sections) {
    if (s.sh_name >= names->size()) continue;
    std::string_view rest(names->data() + s.sh_name, names->size() - s.sh_name);
    if (rest.substr(0, rest.find('\0')) != name || rest.find('\0') == std::string_view::npos) continue;
    if (s.sh_type == SHT_NOBITS) return makeError(path + ": section " + name + " holds no bytes");
    return f.read(s.sh_offset, s.sh_size, ("section " + name).c_str());
  }
  return makeError(path + ": no section " + name);
}

} // namespace sgc::driver
