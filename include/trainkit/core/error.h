// trainkit errors: one hierarchy, messages that say what, where and what to do.
//
//   try { model.fit(x, y); }
//   catch (const tk::InvalidArgument& e) { std::cerr << e.what() << "\n"; }  // a user mistake
//   catch (const tk::Error& e) { ... }                                        // anything trainkit threw
#pragma once
#include <stdexcept>
#include <string>

namespace tk {

// Base of everything trainkit throws. what() is one line: "<what>: <where> (<what to do>)".
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// A value the caller passed is wrong (shape, name, hyperparameter).
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// A file could not be opened, read or written.
class IoError : public Error {
 public:
  using Error::Error;
};

// A file was read but its contents are not what its format promises (message names file and offset).
class FormatError : public Error {
 public:
  using Error::Error;
};

// The request is valid but this build/device cannot do it (e.g. an op without a kernel on a device).
class Unsupported : public Error {
 public:
  using Error::Error;
};

// A memory budget or the device itself could not satisfy an allocation.
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

// Data parallel: replicas disagreed, one failed, or a collective made no progress within its timeout (the message
// names the collective and the replicas or ranks that did not arrive).
class CollectiveError : public Error {
 public:
  using Error::Error;
};

}  // namespace tk
