// An HDF5 handle of any kind (file, group, dataset, space, type, property list), closed when it goes out of scope.
//
//   io::Hdf5Handle f(H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
//   if (f.id < 0) ...
#pragma once
#include <hdf5.h>

namespace tk::io {

struct Hdf5Handle {
  hid_t id = -1;
  herr_t (*close)(hid_t) = nullptr;
  Hdf5Handle(hid_t i, herr_t (*c)(hid_t)) : id(i), close(c) {}
  Hdf5Handle(const Hdf5Handle&) = delete;
  Hdf5Handle& operator=(const Hdf5Handle&) = delete;
  ~Hdf5Handle() {
    if (id >= 0 && close) close(id);
  }
};

}  // namespace tk::io
