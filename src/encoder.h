#ifndef TT_ENCODER_H
#define TT_ENCODER_H
#endif
