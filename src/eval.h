#ifndef TT_EVAL_H
#define TT_EVAL_H
#endif
