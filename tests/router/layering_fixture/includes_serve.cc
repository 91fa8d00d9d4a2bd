// Not compiled: the router_include_check_refuses_serve test points cmake/check_includes.cmake at this folder,
// which must refuse the include below.
#include "serve/pd.h"
