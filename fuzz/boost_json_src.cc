// Boost.JSON compiled from source so the fuzz build instruments the parser.
#include <boost/json/src.hpp>
