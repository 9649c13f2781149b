
×Ö
	
x:
aten::view_as
self
x
other
x
v0;
aten::view_as
self
x
other
v0
v1;
aten::view_as
self
x
other
v1
v2;
aten::view_as
self
x
other
v2
v3;
aten::view_as
self
x
other
v3
v4;
aten::view_as
self
x
other
v4
v5;
aten::view_as
self
x
other
v5
v6;
aten::view_as
self
x
other
v6
v7;
aten::view_as
self
x
other
v7
v8;
aten::view_as
self
x
other
v8
v9<
aten::view_as
self
x
other
v9
v10=
aten::view_as
self
x
other
v10
v11=
aten::view_as
self
x
other
v11
v12=
aten::view_as
self
x
other
v12
v13=
aten::view_as
self
x
other
v13
v14=
aten::view_as
self
x
other
v14
v15=
aten::view_as
self
x
other
v15
v16=
aten::view_as
self
x
other
v16
v17=
aten::view_as
self
x
other
v17
v18=
aten::view_as
self
x
other
v18
v19=
aten::view_as
self
x
other
v19
v20=
aten::view_as
self
x
other
v20
v21=
aten::view_as
self
x
other
v21
v22=
aten::view_as
self
x
other
v22
v23=
aten::view_as
self
x
other
v23
v24=
aten::view_as
self
x
other
v24
v25=
aten::view_as
self
x
other
v25
v26=
aten::view_as
self
x
other
v26
v27=
aten::view_as
self
x
other
v27
v28=
aten::view_as
self
x
other
v28
v29=
aten::view_as
self
x
other
v29
v30=
aten::view_as
self
x
other
v30
v31=
aten::view_as
self
x
other
v31
v32=
aten::view_as
self
x
other
v32
v33=
aten::view_as
self
x
other
v33
v34=
aten::view_as
self
x
other
v34
v35=
aten::view_as
self
x
other
v35
v36=
aten::view_as
self
x
other
v36
v37=
aten::view_as
self
x
other
v37
v38=
aten::view_as
self
x
other
v38
v39=
aten::view_as
self
x
other
v39
v40=
aten::view_as
self
x
other
v40
v41=
aten::view_as
self
x
other
v41
v42=
aten::view_as
self
x
other
v42
v43=
aten::view_as
self
x
other
v43
v44=
aten::view_as
self
x
other
v44
v45=
aten::view_as
self
x
other
v45
v46=
aten::view_as
self
x
other
v46
v47=
aten::view_as
self
x
other
v47
v48=
aten::view_as
self
x
other
v48
v49=
aten::view_as
self
x
other
v49
v50=
aten::view_as
self
x
other
v50
v51=
aten::view_as
self
x
other
v51
v52=
aten::view_as
self
x
other
v52
v53=
aten::view_as
self
x
other
v53
v54=
aten::view_as
self
x
other
v54
v55=
aten::view_as
self
x
other
v55
v56=
aten::view_as
self
x
other
v56
v57=
aten::view_as
self
x
other
v57
v58=
aten::view_as
self
x
other
v58
v59=
aten::view_as
self
x
other
v59
v60=
aten::view_as
self
x
other
v60
v61=
aten::view_as
self
x
other
v61
v62=
aten::view_as
self
x
other
v62
v63=
aten::view_as
self
x
other
v63
v64=
aten::view_as
self
x
other
v64
v65=
aten::view_as
self
x
other
v65
v66=
aten::view_as
self
x
other
v66
v67=
aten::view_as
self
x
other
v67
v68=
aten::view_as
self
x
other
v68
v69=
aten::view_as
self
x
other
v69
v70=
aten::view_as
self
x
other
v70
v71=
aten::view_as
self
x
other
v71
v72=
aten::view_as
self
x
other
v72
v73=
aten::view_as
self
x
other
v73
v74=
aten::view_as
self
x
other
v74
v75=
aten::view_as
self
x
other
v75
v76=
aten::view_as
self
x
other
v76
v77=
aten::view_as
self
x
other
v77
v78=
aten::view_as
self
x
other
v78
v79=
aten::view_as
self
x
other
v79
v80=
aten::view_as
self
x
other
v80
v81=
aten::view_as
self
x
other
v81
v82=
aten::view_as
self
x
other
v82
v83=
aten::view_as
self
x
other
v83
v84=
aten::view_as
self
x
other
v84
v85=
aten::view_as
self
x
other
v85
v86=
aten::view_as
self
x
other
v86
v87=
aten::view_as
self
x
other
v87
v88=
aten::view_as
self
x
other
v88
v89=
aten::view_as
self
x
other
v89
v90=
aten::view_as
self
x
other
v90
v91=
aten::view_as
self
x
other
v91
v92=
aten::view_as
self
x
other
v92
v93=
aten::view_as
self
x
other
v93
v94=
aten::view_as
self
x
other
v94
v95=
aten::view_as
self
x
other
v95
v96=
aten::view_as
self
x
other
v96
v97=
aten::view_as
self
x
other
v97
v98=
aten::view_as
self
x
other
v98
v99>
aten::view_as
self
x
other
v99
v100?
aten::view_as
self
x
other
v100
v101?
aten::view_as
self
x
other
v101
v102?
aten::view_as
self
x
other
v102
v103?
aten::view_as
self
x
other
v103
v104?
aten::view_as
self
x
other
v104
v105?
aten::view_as
self
x
other
v105
v106?
aten::view_as
self
x
other
v106
v107?
aten::view_as
self
x
other
v107
v108?
aten::view_as
self
x
other
v108
v109?
aten::view_as
self
x
other
v109
v110?
aten::view_as
self
x
other
v110
v111?
aten::view_as
self
x
other
v111
v112?
aten::view_as
self
x
other
v112
v113?
aten::view_as
self
x
other
v113
v114?
aten::view_as
self
x
other
v114
v115?
aten::view_as
self
x
other
v115
v116?
aten::view_as
self
x
other
v116
v117?
aten::view_as
self
x
other
v117
v118?
aten::view_as
self
x
other
v118
v119?
aten::view_as
self
x
other
v119
v120?
aten::view_as
self
x
other
v120
v121?
aten::view_as
self
x
other
v121
v122?
aten::view_as
self
x
other
v122
v123?
aten::view_as
self
x
other
v123
v124?
aten::view_as
self
x
other
v124
v125?
aten::view_as
self
x
other
v125
v126?
aten::view_as
self
x
other
v126
v127?
aten::view_as
self
x
other
v127
v128?
aten::view_as
self
x
other
v128
v129?
aten::view_as
self
x
other
v129
v130?
aten::view_as
self
x
other
v130
v131?
aten::view_as
self
x
other
v131
v132?
aten::view_as
self
x
other
v132
v133?
aten::view_as
self
x
other
v133
v134?
aten::view_as
self
x
other
v134
v135?
aten::view_as
self
x
other
v135
v136?
aten::view_as
self
x
other
v136
v137?
aten::view_as
self
x
other
v137
v138?
aten::view_as
self
x
other
v138
v139?
aten::view_as
self
x
other
v139
v140?
aten::view_as
self
x
other
v140
v141?
aten::view_as
self
x
other
v141
v142?
aten::view_as
self
x
other
v142
v143?
aten::view_as
self
x
other
v143
v144?
aten::view_as
self
x
other
v144
v145?
aten::view_as
self
x
other
v145
v146?
aten::view_as
self
x
other
v146
v147?
aten::view_as
self
x
other
v147
v148?
aten::view_as
self
x
other
v148
v149?
aten::view_as
self
x
other
v149
v150?
aten::view_as
self
x
other
v150
v151?
aten::view_as
self
x
other
v151
v152?
aten::view_as
self
x
other
v152
v153?
aten::view_as
self
x
other
v153
v154?
aten::view_as
self
x
other
v154
v155?
aten::view_as
self
x
other
v155
v156?
aten::view_as
self
x
other
v156
v157?
aten::view_as
self
x
other
v157
v158?
aten::view_as
self
x
other
v158
v159?
aten::view_as
self
x
other
v159
v160?
aten::view_as
self
x
other
v160
v161?
aten::view_as
self
x
other
v161
v162?
aten::view_as
self
x
other
v162
v163?
aten::view_as
self
x
other
v163
v164?
aten::view_as
self
x
other
v164
v165?
aten::view_as
self
x
other
v165
v166?
aten::view_as
self
x
other
v166
v167?
aten::view_as
self
x
other
v167
v168?
aten::view_as
self
x
other
v168
v169?
aten::view_as
self
x
other
v169
v170?
aten::view_as
self
x
other
v170
v171?
aten::view_as
self
x
other
v171
v172?
aten::view_as
self
x
other
v172
v173?
aten::view_as
self
x
other
v173
v174?
aten::view_as
self
x
other
v174
v175?
aten::view_as
self
x
other
v175
v176?
aten::view_as
self
x
other
v176
v177?
aten::view_as
self
x
other
v177
v178?
aten::view_as
self
x
other
v178
v179?
aten::view_as
self
x
other
v179
v180?
aten::view_as
self
x
other
v180
v181?
aten::view_as
self
x
other
v181
v182?
aten::view_as
self
x
other
v182
v183?
aten::view_as
self
x
other
v183
v184?
aten::view_as
self
x
other
v184
v185?
aten::view_as
self
x
other
v185
v186?
aten::view_as
self
x
other
v186
v187?
aten::view_as
self
x
other
v187
v188?
aten::view_as
self
x
other
v188
v189?
aten::view_as
self
x
other
v189
v190?
aten::view_as
self
x
other
v190
v191?
aten::view_as
self
x
other
v191
v192?
aten::view_as
self
x
other
v192
v193?
aten::view_as
self
x
other
v193
v194?
aten::view_as
self
x
other
v194
v195?
aten::view_as
self
x
other
v195
v196?
aten::view_as
self
x
other
v196
v197?
aten::view_as
self
x
other
v197
v198?
aten::view_as
self
x
other
v198
v199?
aten::view_as
self
x
other
v199
v200?
aten::view_as
self
x
other
v200
v201?
aten::view_as
self
x
other
v201
v202?
aten::view_as
self
x
other
v202
v203?
aten::view_as
self
x
other
v203
v204?
aten::view_as
self
x
other
v204
v205?
aten::view_as
self
x
other
v205
v206?
aten::view_as
self
x
other
v206
v207?
aten::view_as
self
x
other
v207
v208?
aten::view_as
self
x
other
v208
v209?
aten::view_as
self
x
other
v209
v210?
aten::view_as
self
x
other
v210
v211?
aten::view_as
self
x
other
v211
v212?
aten::view_as
self
x
other
v212
v213?
aten::view_as
self
x
other
v213
v214?
aten::view_as
self
x
other
v214
v215?
aten::view_as
self
x
other
v215
v216?
aten::view_as
self
x
other
v216
v217?
aten::view_as
self
x
other
v217
v218?
aten::view_as
self
x
other
v218
v219?
aten::view_as
self
x
other
v219
v220?
aten::view_as
self
x
other
v220
v221?
aten::view_as
self
x
other
v221
v222?
aten::view_as
self
x
other
v222
v223?
aten::view_as
self
x
other
v223
v224?
aten::view_as
self
x
other
v224
v225?
aten::view_as
self
x
other
v225
v226?
aten::view_as
self
x
other
v226
v227?
aten::view_as
self
x
other
v227
v228?
aten::view_as
self
x
other
v228
v229?
aten::view_as
self
x
other
v229
v230?
aten::view_as
self
x
other
v230
v231?
aten::view_as
self
x
other
v231
v232?
aten::view_as
self
x
other
v232
v233?
aten::view_as
self
x
other
v233
v234?
aten::view_as
self
x
other
v234
v235?
aten::view_as
self
x
other
v235
v236?
aten::view_as
self
x
other
v236
v237?
aten::view_as
self
x
other
v237
v238?
aten::view_as
self
x
other
v238
v239?
aten::view_as
self
x
other
v239
v240?
aten::view_as
self
x
other
v240
v241?
aten::view_as
self
x
other
v241
v242?
aten::view_as
self
x
other
v242
v243?
aten::view_as
self
x
other
v243
v244?
aten::view_as
self
x
other
v244
v245?
aten::view_as
self
x
other
v245
v246?
aten::view_as
self
x
other
v246
v247?
aten::view_as
self
x
other
v247
v248?
aten::view_as
self
x
other
v248
v249?
aten::view_as
self
x
other
v249
v250?
aten::view_as
self
x
other
v250
v251?
aten::view_as
self
x
other
v251
v252?
aten::view_as
self
x
other
v252
v253?
aten::view_as
self
x
other
v253
v254?
aten::view_as
self
x
other
v254
v255?
aten::view_as
self
x
other
v255
v256?
aten::view_as
self
x
other
v256
v257?
aten::view_as
self
x
other
v257
v258?
aten::view_as
self
x
other
v258
v259?
aten::view_as
self
x
other
v259
v260?
aten::view_as
self
x
other
v260
v261?
aten::view_as
self
x
other
v261
v262?
aten::view_as
self
x
other
v262
v263?
aten::view_as
self
x
other
v263
v264?
aten::view_as
self
x
other
v264
v265?
aten::view_as
self
x
other
v265
v266?
aten::view_as
self
x
other
v266
v267?
aten::view_as
self
x
other
v267
v268?
aten::view_as
self
x
other
v268
v269?
aten::view_as
self
x
other
v269
v270?
aten::view_as
self
x
other
v270
v271?
aten::view_as
self
x
other
v271
v272?
aten::view_as
self
x
other
v272
v273?
aten::view_as
self
x
other
v273
v274?
aten::view_as
self
x
other
v274
v275?
aten::view_as
self
x
other
v275
v276?
aten::view_as
self
x
other
v276
v277?
aten::view_as
self
x
other
v277
v278?
aten::view_as
self
x
other
v278
v279?
aten::view_as
self
x
other
v279
v280?
aten::view_as
self
x
other
v280
v281?
aten::view_as
self
x
other
v281
v282?
aten::view_as
self
x
other
v282
v283?
aten::view_as
self
x
other
v283
v284?
aten::view_as
self
x
other
v284
v285?
aten::view_as
self
x
other
v285
v286?
aten::view_as
self
x
other
v286
v287?
aten::view_as
self
x
other
v287
v288?
aten::view_as
self
x
other
v288
v289?
aten::view_as
self
x
other
v289
v290?
aten::view_as
self
x
other
v290
v291?
aten::view_as
self
x
other
v291
v292?
aten::view_as
self
x
other
v292
v293?
aten::view_as
self
x
other
v293
v294?
aten::view_as
self
x
other
v294
v295?
aten::view_as
self
x
other
v295
v296?
aten::view_as
self
x
other
v296
v297?
aten::view_as
self
x
other
v297
v298?
aten::view_as
self
x
other
v298
v299:
aten::add_.Tensor
self
x
other(
w<
aten::mul.Tensor
self
v299
other(
y
y"
x*
cpu"
v0*
cpu"
v1*
cpu"
v2*
cpu"
v3*
cpu"
v4*
cpu"
v5*
cpu"
v6*
cpu"
v7*
cpu"
v8*
cpu"
v9*
cpu"
v10*
cpu"
v11*
cpu"
v12*
cpu"
v13*
cpu"
v14*
cpu"
v15*
cpu"
v16*
cpu"
v17*
cpu"
v18*
cpu"
v19*
cpu"
v20*
cpu"
v21*
cpu"
v22*
cpu"
v23*
cpu"
v24*
cpu"
v25*
cpu"
v26*
cpu"
v27*
cpu"
v28*
cpu"
v29*
cpu"
v30*
cpu"
v31*
cpu"
v32*
cpu"
v33*
cpu"
v34*
cpu"
v35*
cpu"
v36*
cpu"
v37*
cpu"
v38*
cpu"
v39*
cpu"
v40*
cpu"
v41*
cpu"
v42*
cpu"
v43*
cpu"
v44*
cpu"
v45*
cpu"
v46*
cpu"
v47*
cpu"
v48*
cpu"
v49*
cpu"
v50*
cpu"
v51*
cpu"
v52*
cpu"
v53*
cpu"
v54*
cpu"
v55*
cpu"
v56*
cpu"
v57*
cpu"
v58*
cpu"
v59*
cpu"
v60*
cpu"
v61*
cpu"
v62*
cpu"
v63*
cpu"
v64*
cpu"
v65*
cpu"
v66*
cpu"
v67*
cpu"
v68*
cpu"
v69*
cpu"
v70*
cpu"
v71*
cpu"
v72*
cpu"
v73*
cpu"
v74*
cpu"
v75*
cpu"
v76*
cpu"
v77*
cpu"
v78*
cpu"
v79*
cpu"
v80*
cpu"
v81*
cpu"
v82*
cpu"
v83*
cpu"
v84*
cpu"
v85*
cpu"
v86*
cpu"
v87*
cpu"
v88*
cpu"
v89*
cpu"
v90*
cpu"
v91*
cpu"
v92*
cpu"
v93*
cpu"
v94*
cpu"
v95*
cpu"
v96*
cpu"
v97*
cpu"
v98*
cpu"
v99*
cpu"
v100*
cpu"
v101*
cpu"
v102*
cpu"
v103*
cpu"
v104*
cpu"
v105*
cpu"
v106*
cpu"
v107*
cpu"
v108*
cpu"
v109*
cpu"
v110*
cpu"
v111*
cpu"
v112*
cpu"
v113*
cpu"
v114*
cpu"
v115*
cpu"
v116*
cpu"
v117*
cpu"
v118*
cpu"
v119*
cpu"
v120*
cpu"
v121*
cpu"
v122*
cpu"
v123*
cpu"
v124*
cpu"
v125*
cpu"
v126*
cpu"
v127*
cpu"
v128*
cpu"
v129*
cpu"
v130*
cpu"
v131*
cpu"
v132*
cpu"
v133*
cpu"
v134*
cpu"
v135*
cpu"
v136*
cpu"
v137*
cpu"
v138*
cpu"
v139*
cpu"
v140*
cpu"
v141*
cpu"
v142*
cpu"
v143*
cpu"
v144*
cpu"
v145*
cpu"
v146*
cpu"
v147*
cpu"
v148*
cpu"
v149*
cpu"
v150*
cpu"
v151*
cpu"
v152*
cpu"
v153*
cpu"
v154*
cpu"
v155*
cpu"
v156*
cpu"
v157*
cpu"
v158*
cpu"
v159*
cpu"
v160*
cpu"
v161*
cpu"
v162*
cpu"
v163*
cpu"
v164*
cpu"
v165*
cpu"
v166*
cpu"
v167*
cpu"
v168*
cpu"
v169*
cpu"
v170*
cpu"
v171*
cpu"
v172*
cpu"
v173*
cpu"
v174*
cpu"
v175*
cpu"
v176*
cpu"
v177*
cpu"
v178*
cpu"
v179*
cpu"
v180*
cpu"
v181*
cpu"
v182*
cpu"
v183*
cpu"
v184*
cpu"
v185*
cpu"
v186*
cpu"
v187*
cpu"
v188*
cpu"
v189*
cpu"
v190*
cpu"
v191*
cpu"
v192*
cpu"
v193*
cpu"
v194*
cpu"
v195*
cpu"
v196*
cpu"
v197*
cpu"
v198*
cpu"
v199*
cpu"
v200*
cpu"
v201*
cpu"
v202*
cpu"
v203*
cpu"
v204*
cpu"
v205*
cpu"
v206*
cpu"
v207*
cpu"
v208*
cpu"
v209*
cpu"
v210*
cpu"
v211*
cpu"
v212*
cpu"
v213*
cpu"
v214*
cpu"
v215*
cpu"
v216*
cpu"
v217*
cpu"
v218*
cpu"
v219*
cpu"
v220*
cpu"
v221*
cpu"
v222*
cpu"
v223*
cpu"
v224*
cpu"
v225*
cpu"
v226*
cpu"
v227*
cpu"
v228*
cpu"
v229*
cpu"
v230*
cpu"
v231*
cpu"
v232*
cpu"
v233*
cpu"
v234*
cpu"
v235*
cpu"
v236*
cpu"
v237*
cpu"
v238*
cpu"
v239*
cpu"
v240*
cpu"
v241*
cpu"
v242*
cpu"
v243*
cpu"
v244*
cpu"
v245*
cpu"
v246*
cpu"
v247*
cpu"
v248*
cpu"
v249*
cpu"
v250*
cpu"
v251*
cpu"
v252*
cpu"
v253*
cpu"
v254*
cpu"
v255*
cpu"
v256*
cpu"
v257*
cpu"
v258*
cpu"
v259*
cpu"
v260*
cpu"
v261*
cpu"
v262*
cpu"
v263*
cpu"
v264*
cpu"
v265*
cpu"
v266*
cpu"
v267*
cpu"
v268*
cpu"
v269*
cpu"
v270*
cpu"
v271*
cpu"
v272*
cpu"
v273*
cpu"
v274*
cpu"
v275*
cpu"
v276*
cpu"
v277*
cpu"
v278*
cpu"
v279*
cpu"
v280*
cpu"
v281*
cpu"
v282*
cpu"
v283*
cpu"
v284*
cpu"
v285*
cpu"
v286*
cpu"
v287*
cpu"
v288*
cpu"
v289*
cpu"
v290*
cpu"
v291*
cpu"
v292*
cpu"
v293*
cpu"
v294*
cpu"
v295*
cpu"
v296*
cpu"
v297*
cpu"
v298*
cpu"
v299*
cpu"
w*
cpu"
y*
cpuI
aten::view_as8aten::view_as(Tensor(a) self, Tensor other) -> Tensor(a)f
aten::add_.TensorQaten::add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)I
aten::mul.Tensor5aten::mul.Tensor(Tensor self, Tensor other) -> Tensor"1.13.0a0