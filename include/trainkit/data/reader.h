// ElementReader: the interface every file format implements so a Dataset can stream it.
//
//   std::unique_ptr<tk::data::ElementReader> r = tk::data::open_csv("train.csv", options);
//   tk::data::Element row;
//   while (r->next(row)) { /* row[0], row[1], ... one tensor per column / feature */ }
//
// A reader yields one element (a tuple of tensors) per call, in file order; a Dataset opens a fresh
// reader for every pass. Errors are tk::IoError (cannot open or read) or tk::FormatError (bad contents),
// and their messages name the file and the byte offset (or record / row) where the problem is.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "trainkit/core/tensor.h"

namespace tk::data {

// One dataset element: a tuple of tensors (features first, then labels, by convention).
using Element = std::vector<Tensor>;

class ElementReader {
 public:
  virtual ~ElementReader() = default;
  // Fills `out` (resized as needed) with the next element; returns false at the end of the file.
  virtual bool next(Element& out) = 0;
  // Where the reader is, for error messages and progress ("train.csv line 1042", "a.tfrecord offset 4096").
  virtual std::string position() const = 0;
};

}  // namespace tk::data
