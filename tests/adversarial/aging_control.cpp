// The control of aging.cpp: the same kernel, young forever (it never slows down). Compared against the task's
// baseline it must read its true figure: a verdict with a metric, and no arm ages.
#define KWB_AGING_YOUNG_CALLS (1L << 60)
#include "aging.cpp"
