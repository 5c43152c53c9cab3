// The control of data_prediction.cpp: the very same honest kernel, without the table of predicted answers. Compared
// against each other, the two must read the same (docs/threat-model.md, "Timed data from a secret").
#define KWB_HONEST_ONLY
#include "data_prediction.cpp"
